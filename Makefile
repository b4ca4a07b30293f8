# The two commands of the README, `make demo` and `make test`. Each installs what it needs first
# (scripts/setup.sh): the demo its own part (no helm, no promtool, no test tools), the tests all.
CACHE ?= $(or $(STATICFLEET_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/staticfleet)
VENV := $(CACHE)/venv
export PATH := $(VENV)/bin:$(PATH)

.PHONY: setup setup-demo demo test lint unit docs api-docs
setup:
	@bash scripts/setup.sh all

setup-demo:
	@bash scripts/setup.sh demo

demo: setup-demo
	staticfleet demo $(DEMO_ARGS)

lint:
	ruff check operator consumer_runtime member_contract kafkawire staticfleet_dev tests bench scripts
	mypy
	lint-imports
	python scripts/sync-crds.py --check
	python scripts/gen-api-docs.py --check
	python -m staticfleet_dev.dashboard --check
	python -m staticfleet_dev.grafana_alerts --check

unit: setup
	pytest -m unit -q

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link or a page left out
# of the navigation. docs/api.md is generated from the CRD: `make api-docs` after changing it.
docs:
	NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet

api-docs:
	python scripts/gen-api-docs.py

# Every tier in one pytest run of two pytest-xdist workers: `--dist loadfile` with the whole e2e
# tier as one unit (tests/conftest.py, `pytest_xdist_make_scheduler`), in collection order (e2e
# first): one worker runs the e2e tier in order (its cases share one environment, operator and
# Spark Connect server), the other the unit and integration modules beside it (each worker starts
# its own broker and API server; the integration tests mostly wait on them).
test: setup lint docs
	pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder --durations=25
