# The two commands of the README. Both install what they need first (scripts/setup.sh).
CACHE ?= $(or $(STATICFLEET_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/staticfleet)
VENV := $(CACHE)/venv
export PATH := $(VENV)/bin:$(PATH)

.PHONY: setup demo test lint unit
setup:
	@bash scripts/setup.sh

demo: setup
	staticfleet demo $(DEMO_ARGS)

lint:
	ruff check operator consumer_runtime staticfleet_dev tests bench scripts
	mypy
	lint-imports
	python scripts/sync-crds.py --check
	python -m staticfleet_dev.dashboard --check
	python -m staticfleet_dev.grafana_alerts --check

unit: setup
	pytest -m unit -q

# Unit and integration tests in two pytest-xdist workers (each starts its own broker and API
# server; the integration tests mostly wait on them), then the e2e tier alone: its cases share
# one environment, operator and Spark Connect server, and assert sub-second figures that a
# second stream of work beside them would blur.
# Both runs go to the end; the target fails if either failed.
test: setup lint
	pytest -q -p no:cacheprovider -m "not e2e" -n 2 --dist loadfile --durations=25; \
	first=$$?; \
	pytest -q -p no:cacheprovider -m e2e --durations=25; \
	second=$$?; \
	test $$first -eq 0 && test $$second -eq 0
