# nvcc-evo: `make tune` is the main job, `make test` runs the tests.
# Both set up everything on a fresh machine (a virtual environment in .venv).
# Build outputs of this Makefile go to out/ (pip keeps its own build/).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EVO := $(abspath $(BIN)/nvcc-evo)
ARCH ?= sm_90
OUT := out

.PHONY: setup test tune kernels clean gpu-setup gpu-test bench report

# `make tune` needs the package (and, where a GPU answers, PyCUDA and NVML);
# `make test` adds the test tools and a second CUDA toolkit (13.5) for the
# two-toolkit tests, which tune never needs.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
# Editable, in setuptools' default mode, without its "Editable installation" banner (pip 26 shows
# a build backend's warnings even with -q): compat mode (a .pth of the tree) had none but printed
# "The 'compat' editable mode is transitional" on every set-up instead (setuptools 84).
EDITABLE := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q -e
comma := ,
$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(EDITABLE) ".$(if $(HAS_GPU),[gpu])"
	rm -f $(VENV)/.test
	touch $@
# ptxas 13.3 (the extra ptxas133) apart from CUDA 13.5: both are the package nvidia-cuda-nvcc.
PTXAS133 := $(shell sed -n 's/^ptxas133 = \["\(.*\)"\]/\1/p' pyproject.toml)
$(VENV)/.test: $(VENV)/.base
	$(EDITABLE) ".[test,cuda135,methodology$(if $(HAS_GPU),$(comma)gpu)]"
	$(BIN)/python -m pip install -q --no-deps --target $(VENV)/ptxas133 "$(PTXAS133)"
	touch $@

setup: $(VENV)/.test

# The tests run in TEST_WORKERS processes (pytest-xdist), a test file per
# worker at a time (--dist loadfile): a file's module fixtures are made once
# and its Ray tests never meet another Ray. One worker per core of a CI
# machine (2): more would gain little (the suite is mostly real nvcc runs)
# and would load the tests that wait on a retune or a signal.
# mypy checks nvcc_evo/ first ([tool.mypy] in pyproject.toml): a type error fails the run.
# The run ends with its 30 slowest tests (--durations), so that every CI log shows which tests
# set its time and which grow slow.
TEST_WORKERS ?= 2
test: $(VENV)/.test
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

# The main job: build the kernels through the wrapper (which records how
# each is compiled), retune what is stale, and build again with the result.
# With a GPU (PyCUDA + a device): runtime and energy, into kernels/nvcc-evo.acf.
# Without one: static objectives (spills, registers from ptxas) on a copy in
# out/static/, so that the committed entries, measured on an H200, are never
# overwritten by a proxy. The copy is kept between runs: a second run retunes
# only what changed since (a new copy, retuned whole, when the ACF changes).
EVALUATIONS ?= 36
STATIC := $(OUT)/static
tune: $(VENV)/.base
	$(EVO) --acf-check kernels/nvcc-evo.acf
	@if $(BIN)/python -c "from nvcc_evo.measure.pycuda.devices import gpu_available as g; raise SystemExit(not g())" 2>/dev/null; then \
	    $(MAKE) --no-print-directory kernels NVCC=$(EVO) && \
	    $(EVO) --retune --acf kernels/nvcc-evo.acf --backend pycuda --evaluations $(EVALUATIONS) && \
	    $(MAKE) --no-print-directory kernels NVCC=$(EVO) && \
	    echo "tune: measured on this GPU; the result is in kernels/nvcc-evo.acf" && \
	    echo "tune: build with it: make kernels NVCC=$(EVO)  (objects in $(OUT)/kernels/)"; \
	else \
	    $(MAKE) --no-print-directory static-tune; \
	fi

.PHONY: static-tune
static-tune:
	@echo "tune: no GPU here: tuning static objectives (spills, registers: compiler facts, not speed)"
	@echo "tune: speed-safe: no lower -O level, registers counted only as the occupancy they allow"
	@echo "tune: on a copy in $(STATIC)/; kernels/nvcc-evo.acf keeps its GPU-measured entries"
	@if ! cmp -s kernels/nvcc-evo.acf $(STATIC)/.acf-copied-from; then \
	    rm -rf $(STATIC) && mkdir -p $(OUT) && cp -rp kernels $(STATIC) && rm -rf $(STATIC)/.nvcc-evo && \
	    cp -p kernels/nvcc-evo.acf $(STATIC)/.acf-copied-from && touch $(STATIC)/.retune-all; \
	else \
	    cp -p $(wildcard kernels/*.cu kernels/*.cuh kernels/*.h kernels/*.py) $(STATIC)/; \
	fi
	$(MAKE) --no-print-directory kernels SRC=$(STATIC) NVCC=$(EVO)
	$(EVO) --retune --acf $(STATIC)/nvcc-evo.acf --backend static --evaluations $(EVALUATIONS) \
	    $$(test -e $(STATIC)/.retune-all && echo --all)
	@rm -f $(STATIC)/.retune-all
	$(MAKE) --no-print-directory kernels SRC=$(STATIC) NVCC=$(EVO)
	@echo "tune: the static result is in $(STATIC)/nvcc-evo.acf; objects built with it in $(STATIC)/obj/"
	@echo "tune: build with it: make kernels SRC=$(STATIC) NVCC=$(EVO)"

# The kernel suite, built as a user's project would be: NVCC=nvcc-evo.
# Objects depend on the ACF, so a retune or a hand edit rebuilds them.
NVCC ?= nvcc
SRC ?= kernels
OBJ := $(if $(filter kernels,$(SRC)),$(OUT)/kernels,$(SRC)/obj)
KERNELS := $(patsubst $(SRC)/%.cu,$(OBJ)/%.o,$(wildcard $(SRC)/*.cu))
kernels: $(KERNELS)
$(OBJ)/%.o: $(SRC)/%.cu $(SRC)/nvcc-evo.acf
	@mkdir -p $(OBJ)
	$(NVCC) -arch=$(ARCH) -c $< -o $@ -MMD -MF $@.d
-include $(KERNELS:=.d)

# The HTML report of the committed H200 records (no GPU): out/report.html.
report: $(VENV)/.base
	$(EDITABLE) ".[report]"
	$(EVO) --report --acf kernels/nvcc-evo.acf --store benchmarks/data/h200-search.jsonl --out $(OUT)/report.html

clean:
	rm -rf $(OUT)

# GPU tests and a GPU retune on a machine without network: the project runs
# from the source tree, with PyCUDA and its pure-Python dependencies carried
# as wheels in .device-wheels/ (built for that machine's Python).
SITE ?= /tmp/evo-site
gpu-setup:
	python3 -m pip install -q --no-index --no-deps --target $(SITE) .device-wheels/*.whl
	mkdir -p $(SITE)/bin && printf '#!/bin/sh\nexec python3 -m nvcc_evo "$$@"\n' > $(SITE)/bin/nvcc-evo && chmod +x $(SITE)/bin/nvcc-evo
gpu-test: gpu-setup
	PYTHONPATH=$(CURDIR):$(SITE) python3 -m pytest -q -m gpu $(wildcard tests/test_gpu*.py)

# The kernel benchmark on a GPU: default against tuned builds, side by side.
# With carried wheels (.device-wheels/, a machine without network) it runs
# from the source tree; otherwise from the virtual environment.
ifneq ($(wildcard .device-wheels/*.whl),)
bench: gpu-setup
	PYTHONPATH=$(CURDIR):$(SITE) python3 benchmarks/bench.py --out $(OUT)/bench
else
bench: $(VENV)/.base
	$(BIN)/python benchmarks/bench.py --out $(OUT)/bench
endif
