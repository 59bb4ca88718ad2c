# kvtier, a plain Makefile. `make help` lists the targets.

BUILD	?= build
CC	?= cc
OPT	?= -O2
SAN	?=
PKGS	 = liburing numa inih libxxhash openblas
# Debian packages behind $(PKGS) and the tools the tests and benchmarks use
# (gnuplot: kvt-sim mrc --plot; optional, so deps-check does not ask for it).
DEB_PKGS = build-essential pkg-config liburing-dev libnuma-dev libinih-dev \
	   libxxhash-dev libopenblas-dev fio gnuplot-nox

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CFLAGS	?= $(OPT) -g
CFLAGS	+= -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -fPIC \
	   -fvisibility=hidden -pthread -Iinclude -I. $(PKG_CFLAGS)
ifneq ($(SAN),)
CFLAGS	+= -fsanitize=$(SAN) -fno-omit-frame-pointer -DKVT_DEBUG=1
LDFLAGS	+= -fsanitize=$(SAN)
endif
LDLIBS	+= $(PKG_LIBS) -lm -pthread -ldl

GEN	 = $(BUILD)/gen
CFLAGS	+= -I$(GEN)
LIB_SRC	 = $(wildcard pager/*.c pager/policy/*.c kernels/*.c kernels/cpu/*.c runtime/*.c)
LIB_OBJ	 = $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOLS	 = $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/kvt-*.c)) $(BUILD)/kvtctl
TEST_SRC = $(wildcard tests/t_*.c)
TESTS	 = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_COMMON = $(BUILD)/tests/common.o

# Keep the objects of tests and tools: they are not throwaway intermediates.
.SECONDARY:

.PHONY: all lib tools tests test run bench xcheck asan tsan deps deps-check clean help

# all: the library (static and shared) and the tools
all: lib tools

lib: $(BUILD)/libkvt.a $(BUILD)/libkvt.so

tools: $(TOOLS)

# Policy plug-ins for t_plugin: the example of docs/policies.md, and copies
# the loader must refuse (no symbol, a NULL method, a built-in's name, the
# example's name from another file).
PLUGINS = $(addprefix $(BUILD)/plugins/,example.so nosym.so novictims.so builtin.so twin.so)
PLUGIN_DEFS_nosym     = -DEXAMPLE_NAME='"layerlru"' -DEXAMPLE_SYMBOL=kvt_policy_elsewhere \
			-DEXAMPLE_VICTIMS=ll_victims
PLUGIN_DEFS_novictims = -DEXAMPLE_NAME='"layerlru"' -DEXAMPLE_SYMBOL=kvt_policy \
			-DEXAMPLE_VICTIMS=NULL -Wno-unused-function
PLUGIN_DEFS_builtin   = -DEXAMPLE_NAME='"lru"' -DEXAMPLE_SYMBOL=kvt_policy \
			-DEXAMPLE_VICTIMS=ll_victims
$(BUILD)/plugins/%.so: docs/examples/policy_example.c pager/policy.h pager/policy/helpers.h \
		       pager/policy/list.h Makefile | $(GEN)/policies.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PLUGIN_DEFS_$*) -shared $(LDFLAGS) -o $@ $<

tests: $(TESTS) $(PLUGINS)

$(BUILD)/%.o: %.c | $(GEN)/policies.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The policy registry: one line per file under pager/policy/ that defines a
# policy table, so a new policy needs no edit anywhere else.
POLICY_SRC = $(wildcard pager/policy/*.c)
$(GEN)/policies.h: $(POLICY_SRC) Makefile
	@mkdir -p $(dir $@)
	@sed -n 's/^const struct kvt_policy_ops \(kvt_policy_[a-z0-9_]*\) = {$$/KVT_POLICY(\1)/p' \
		$(POLICY_SRC) > $@.tmp && mv $@.tmp $@

# The compute kernels are the hot loops of the forward pass.
$(BUILD)/kernels/cpu/%.o: OPT = -O3

$(BUILD)/libkvt.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libkvt.so: $(LIB_OBJ) libkvt.map
	$(CC) -shared -Wl,--version-script=libkvt.map -Wl,-soname,libkvt.so.0 \
		$(LDFLAGS) -o $@ $(LIB_OBJ) $(LDLIBS)

BENCH_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/bench_*.c))
CLI_OBJ	  = $(BUILD)/tools/cli.o

$(BUILD)/kvt-bench: $(BUILD)/tools/kvt-bench.o $(BENCH_OBJ) $(CLI_OBJ) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kvt-%: $(BUILD)/tools/kvt-%.o $(CLI_OBJ) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The control socket's client; its name has no dash, so TOOLS lists it by hand.
$(BUILD)/kvtctl: $(BUILD)/tools/kvtctl.o $(CLI_OBJ) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/t_%: $(BUILD)/tests/t_%.o $(TEST_COMMON) $(BUILD)/libkvt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# deps: install the Debian packages that are missing (root only)
deps:
	@missing=""; for p in $(DEB_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' \
			|| missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "deps: all installed"; exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "deps: missing:$$missing; run 'make deps' as root" >&2; exit 1; fi; \
	echo "deps: installing$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing

deps-check:
	@pkg-config --exists $(PKGS) 2>/dev/null && command -v fio >/dev/null \
		|| $(MAKE) --no-print-directory deps

# test: build everything and run the suite (closing line: N passed, N failed, N skipped)
test: deps-check
	@$(MAKE) --no-print-directory all tests
	@BUILD=$(BUILD) tests/run.sh $(TESTS)

# run: the main job on embedded defaults: kvt-run on a synthetic model (made
# once) with the project's docs as a long prompt; KV 8x the fast tier
RUN_MODEL ?= $(BUILD)/kvt-synth-8x512-32k.gguf
RUN_FLAGS ?= -n 128 --fast 16M --host 32M
RUN_PROMPT = $(BUILD)/run-prompt.txt
run: deps-check
	@[ -x $(BUILD)/kvt-run ] || echo "building libkvt and the tools..."
	@$(MAKE) --no-print-directory -s tools
	@[ -f $(RUN_MODEL) ] || { echo "writing a synthetic model to $(RUN_MODEL)"; \
		$(BUILD)/kvt-mkmodel --layers 8 --dim 512 --heads 8 --kv-heads 4 --ff 1536 \
			--ctx 32768 --type f16 -o $(RUN_MODEL); }
	@cat README.md docs/architecture.md docs/config.md | head -c 26000 > $(RUN_PROMPT)
	$(BUILD)/kvt-run -m $(RUN_MODEL) -f $(RUN_PROMPT) $(RUN_FLAGS)

# bench: every kvt-bench measurement, human tables
bench: deps-check
	@$(MAKE) --no-print-directory -s tools
	$(BUILD)/kvt-bench all

# xcheck: kvt-run's logits against llama.cpp's (npm's node-llama-cpp), by hand
xcheck: deps-check
	@$(MAKE) --no-print-directory -s tools
	@BUILD=$(BUILD) tools/xcheck/run.sh

# The kernels run OpenBLAS on one thread (the pool supplies the parallelism);
# under the sanitizers its idle start-up threads spin long enough to trip
# t_nospin's CPU check, so they are not started there.
SAN_ENV = KVT_TEST_SCALE=4 OPENBLAS_NUM_THREADS=1

# asan: the suite under AddressSanitizer and UBSan
asan: deps-check
	@$(SAN_ENV) $(MAKE) --no-print-directory BUILD=build/asan SAN=address,undefined OPT=-O1 test

# tsan: the suite under ThreadSanitizer
tsan: deps-check
	@$(SAN_ENV) $(MAKE) --no-print-directory BUILD=build/tsan SAN=thread OPT=-O1 test

# clean: remove build/
clean:
	rm -rf build

# help: this list
help:
	@sed -n 's/^# \([a-z-]*\): /  \1\t/p' Makefile

-include $(LIB_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TESTS:%=%.d) $(TEST_COMMON:.o=.d) \
	 $(patsubst tools/%.c,$(BUILD)/tools/%.d,$(wildcard tools/kvt-*.c)) $(BUILD)/tools/kvtctl.d
