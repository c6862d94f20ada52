# Two commands: `make demo` (set up, then run the simulated workcell) and
# `make test` (set up, then lint and the whole test suite). `make shell` opens a
# shell with everything sourced.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help setup test lint demo shell bench clean

help:
	@echo "make demo   set up, then run the simulated workcell demo"
	@echo "make test   set up, then ruff and pytest"
	@echo "make shell  a shell with the venv, ROS 2 and the workspace sourced"
	@echo "make bench  run every benchmark in bench/"

setup:
	@scripts/setup.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: setup lint
	@source env.sh && python -m pytest robokernel_ros/test $(PYTEST_ARGS)

demo: setup
	@source env.sh && python -m robokernel_ros.demo $(DEMO_ARGS)

shell: setup
	@bash --rcfile <(echo 'source ~/.bashrc 2>/dev/null; source env.sh; PS1="(robokernel) $$PS1"') -i

bench: setup
	@source env.sh && for b in bench/*.py; do echo "== $$b"; python $$b --quick || exit 1; done

clean:
	rm -rf build install log $(VENV)
