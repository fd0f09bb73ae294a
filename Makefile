# nvcc-evo: `make tune` is the main job, `make test` runs the tests.
# Both set up everything on a fresh machine (a virtual environment in .venv).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EVO := $(abspath $(BIN)/nvcc-evo)
ARCH ?= sm_90
BUILD := build

.PHONY: setup test tune kernels clean gpu-setup gpu-test bench

# Where a GPU answers (nvidia-smi), the GPU extra (PyCUDA, NVML) comes too,
# so that `make tune` and `make bench` measure on it.
EXTRAS := test,cuda135$(shell nvidia-smi -L >/dev/null 2>&1 && echo ,gpu)
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

test: setup
	$(BIN)/python -m pytest -q

# The main job: build every kernel through the wrapper (which records how
# each is compiled), retune, and build again.
# With a GPU (PyCUDA + a device): runtime and energy, stale units only, into
# kernels/nvcc-evo.acf. Without one: static objectives (spills and registers
# from ptxas) on a copy in build/static/, so that the committed entries,
# measured on an H200, are not overwritten by a proxy; said in the output.
EVALUATIONS ?= 36
GPU := $(shell $(BIN)/python -c "from nvcc_evo.measure.gpu import gpu_available as g; print(int(g()))" 2>/dev/null)
tune: setup
	$(EVO) --acf-check kernels/nvcc-evo.acf
	$(MAKE) -B kernels NVCC=$(EVO)
ifeq ($(GPU),1)
	$(EVO) --retune --acf kernels/nvcc-evo.acf --backend pycuda --evaluations $(EVALUATIONS)
	$(MAKE) -B kernels NVCC=$(EVO)
else
	@echo "tune: no GPU here: tuning static objectives (spills, registers) on a copy in $(BUILD)/static/;"
	@echo "tune: kernels/nvcc-evo.acf keeps its GPU-measured entries"
	rm -rf $(BUILD)/static && mkdir -p $(BUILD) && cp -r kernels $(BUILD)/static && rm -rf $(BUILD)/static/.nvcc-evo
	$(EVO) --retune --all --acf $(BUILD)/static/nvcc-evo.acf --backend static --evaluations $(EVALUATIONS)
endif

# The kernel suite, built as a user's project would be: NVCC=nvcc-evo.
NVCC ?= nvcc
KERNELS := $(patsubst kernels/%.cu,$(BUILD)/%.o,$(wildcard kernels/*.cu))
kernels: $(KERNELS)
$(BUILD)/%.o: kernels/%.cu
	@mkdir -p $(BUILD)
	$(NVCC) -arch=$(ARCH) -c $< -o $@ -MMD -MF $@.d
-include $(KERNELS:=.d)

clean:
	rm -rf $(BUILD)

# GPU tests and a GPU retune on a machine without network (the H200): the
# project runs from the source tree with carried wheels (see ../shared/DEVICE.md).
SITE ?= /tmp/evo-site
gpu-setup:
	python3 -m pip install -q --no-index --no-deps --target $(SITE) .device-wheels/*.whl
	mkdir -p $(SITE)/bin && printf '#!/bin/sh\nexec python3 -m nvcc_evo "$$@"\n' > $(SITE)/bin/nvcc-evo && chmod +x $(SITE)/bin/nvcc-evo
gpu-test: gpu-setup
	PYTHONPATH=$(CURDIR):$(SITE) python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_logic.py

# The kernel benchmark on a GPU: default against tuned builds, side by side.
# With carried wheels (.device-wheels/, a machine without network) it runs
# from the source tree; otherwise from the virtual environment.
ifneq ($(wildcard .device-wheels/*.whl),)
bench: gpu-setup
	PYTHONPATH=$(CURDIR):$(SITE) python3 benchmarks/bench.py --out $(BUILD)/bench
else
bench: setup
	$(BIN)/python benchmarks/bench.py --out $(BUILD)/bench
endif
