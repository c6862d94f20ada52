# Two commands: `make demo` (set up, then run the simulated workcell) and
# `make test` (set up, then lint, the docs site and the whole test suite). `make shell` opens a
# shell with everything sourced.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help setup test lint docs demo shell bench clean

help:
	@echo "make demo   set up, then run the simulated workcell demo"
	@echo "make test   set up, then ruff, the docs site and pytest"
	@echo "make docs   build the docs/ site (Sphinx + MyST) into docs/_build/html"
	@echo "make shell  a shell with the venv, ROS 2 and the workspace sourced"
	@echo "make bench  run every benchmark in bench/"

setup:
	@scripts/setup.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# -E: every page and docstring read afresh (a cached page would hide its warnings);
# -W --keep-going: any warning fails the build, after listing them all.
docs: setup
	@source env.sh && sphinx-build -E -q -W --keep-going -b html docs docs/_build/html

# pytest on two workers (pytest-xdist: whole test files per worker, the longest first; the
# tests marked whole_machine first and alone: robokernel_ros/test/xdist_schedule.py).
# PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2
test: setup lint docs
	@source env.sh && python -m pytest robokernel_ros/test -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

demo: setup
	@source env.sh && python -m robokernel_ros.demo $(DEMO_ARGS)

shell: setup
	@bash --rcfile <(echo 'source ~/.bashrc 2>/dev/null; source env.sh; PS1="(robokernel) $$PS1"') -i

# Every bench (the files of bench/ with a __main__ block; the others are their modules)
# with --quick; all run, then the ones that failed (exit status != 0: a failed verdict,
# or an error) are named and make fails.
bench: setup
	@source env.sh && failed=""; for b in bench/*.py; do \
	  grep -q '^if __name__ == "__main__":' $$b || continue; \
	  echo "== $$b"; python $$b --quick || failed="$$failed $$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed"; exit 1; fi

clean:
	rm -rf build install log $(VENV)
