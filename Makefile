# gradmesh build.  `make` builds ./gradmesh; see README.md for the rest.
#
#   make                  build (release flags, -O3 -march=native)
#   make test             install missing Debian packages, build, run every test
#   make demo             train locally on Fashion-MNIST (becomes the distributed demo later)
#   make bench            benchmarks against PyTorch (prints ratios)
#   make fuzz             build the libFuzzer targets (clang) into build-fuzz/
#   make SAN=address,undefined test      same tests under sanitizers (objects in build-san/)
#   make CUDA=auto|0|1    auto: build the CUDA backend when nvcc is found
#   make V=1              show commands
#   make format-check     clang-format conformance

CC ?= cc
SAN ?=
CUDA ?= auto
V ?= 0
OPT ?= -O3 -march=native -fno-math-errno
FUZZ_SECONDS ?= 10

ifeq ($(V),1)
Q :=
else
Q := @
endif

BUILD := build$(if $(SAN),-san)
PKGS := openblas zlib libpng libjpeg inih libuv libsodium openssl jansson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
	-Wformat=2 -Wimplicit-fallthrough
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE -I. $(PKG_CFLAGS) $(WARN) $(OPT) -g -MMD -MP -pthread $(CFLAGS)
LDLIBS_ALL := $(PKG_LIBS) -lm -pthread $(LDLIBS)

ifneq ($(SAN),)
CFLAGS_ALL += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif

# --- CUDA ------------------------------------------------------------------
NVCC_FOUND := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CUDA),auto)
  ifneq ($(NVCC_FOUND),)
    USE_CUDA := 1
  else
    USE_CUDA := 0
  endif
else ifeq ($(CUDA),1)
  ifeq ($(NVCC_FOUND),)
    $(error CUDA=1 but nvcc was not found (PATH or /usr/local/cuda/bin))
  endif
  USE_CUDA := 1
else
  USE_CUDA := 0
endif
# Sanitized builds stay CPU-only: nvcc objects and ASan do not mix well.
ifneq ($(SAN),)
  USE_CUDA := 0
endif

CU_SRCS := $(wildcard train/kernels/*.cu)
# Nothing to build until the tree has CUDA kernels (train/kernels/*.cu).
ifeq ($(CU_SRCS),)
  ifeq ($(USE_CUDA),1)
    CUDA_REASON := nvcc found, but no CUDA kernels in this tree yet
  endif
  USE_CUDA := 0
endif
ifeq ($(USE_CUDA),1)
  CUDA_HOME := $(patsubst %/bin/nvcc,%,$(NVCC_FOUND))
  CFLAGS_ALL += -DGM_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart
  CU_OBJS := $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
  CUDA_NOTE := CUDA backend: on ($(NVCC_FOUND))
else
  CU_OBJS :=
  CUDA_NOTE := CUDA backend: off$(if $(CUDA_REASON), ($(CUDA_REASON)))
endif
NVCCFLAGS ?= -O3 -std=c++17 -arch=native -I. -Xcompiler -fPIC

# --- sources ---------------------------------------------------------------
MAIN_SRC := agent/main.c
# train/*/*.c: train's sub-folders (nn, kernels, data, comm, compress, ckpt)
LIB_SRCS := $(filter-out $(MAIN_SRC),$(wildcard common/*.c crypto/*.c discovery/*.c train/*.c \
	train/*/*.c agent/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CU_OBJS)
LIB := $(BUILD)/libgradmesh.a
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/%)
BIN := gradmesh$(if $(SAN),-san)

.PHONY: all test unit demo bench fuzz deps clean format format-check cuda-note
all: $(BIN) cuda-note

cuda-note:
	@echo "$(CUDA_NOTE)"

$(BIN): $(BUILD)/agent/main.o $(LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(LIB): $(LIB_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -c -o $@ $<

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC_FOUND) $(NVCCFLAGS) -DGM_HAVE_CUDA=1 -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS_ALL)

# Installs missing Debian packages as root, or prints the apt-get line.
deps:
	$(Q)bash .ci/deps.sh

unit: $(BIN) $(TEST_BINS)

# Everything CI runs.  tests/run.sh prints "N passed, N failed, N skipped".
test: deps
	$(Q)$(MAKE) --no-print-directory unit
	$(Q)GM_BIN=./$(BIN) GM_BUILD=$(BUILD) GM_SAN="$(SAN)" FUZZ_SECONDS=$(FUZZ_SECONDS) \
		bash tests/run.sh $(TEST_BINS)

demo: deps
	$(Q)$(MAKE) --no-print-directory $(BIN)
	$(Q)bash tests/demo.sh ./$(BIN)

bench: deps
	$(Q)$(MAKE) --no-print-directory $(BIN)
	$(Q)bash bench/run.sh ./$(BIN)

# --- fuzzers (clang + libFuzzer + ASan/UBSan), every lib source rebuilt -----
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -I. $(PKG_CFLAGS) -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
FUZZ_OBJS := $(filter-out build-fuzz/train/kernels/%.cu.o,$(LIB_SRCS:%.c=build-fuzz/%.o))

build-fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CLANG   $<"
	$(Q)clang $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJS)
	@echo "  FUZZ    $@"
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lm -pthread

fuzz: $(FUZZ_BINS)

# keep the fuzz objects between runs (make would delete them as intermediates)
.SECONDARY: $(FUZZ_OBJS)

format:
	$(Q)clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	$(Q)clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-san build-fuzz gradmesh gradmesh-san

-include $(shell find build build-san build-fuzz -name '*.d' 2>/dev/null)
