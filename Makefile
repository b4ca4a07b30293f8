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

# The documentation site (mkdocs.yml, docs/): --strict fails on any warning (a broken link or
# anchor, a page left out of the navigation). Never --quiet: it drops the warnings before strict
# mode counts them, and the gate passed on a broken anchor that way. docs/api.md is generated
# from the CRD: `make api-docs` after changing it.
docs:
	NO_MKDOCS_2_WARNING=1 mkdocs build --strict

api-docs:
	python scripts/gen-api-docs.py

# Every tier in one pytest run of TEST_WORKERS pytest-xdist workers (tests/lanes.py): each test
# module is one unit, handed to the next free worker longest first by tests/durations.json, and
# the modules marked `exclusive` (CPU heavy: every e2e module) never run beside one another. Two
# workers: the suite keeps this machine's two cores busy (a measured run: CPU idle 3 % at the
# median), and three overloaded it (load average 20, three e2e modules failing in 16 minutes). Each worker starts its
# own broker and API server (and, for the e2e modules, its own operator, local node and Spark
# Connect server) on first use. `make lint docs` runs beside the tests and is awaited at the end
# (scripts/run-tests.sh): either failing fails the target.
TEST_WORKERS ?= 2
export RUFF_CACHE_DIR := $(CACHE)/ruff-cache
export MYPY_CACHE_DIR := $(CACHE)/mypy-cache
test: setup
	bash scripts/run-tests.sh $(TEST_WORKERS)
