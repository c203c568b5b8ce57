# wbcache build.  `make` builds the library, the CLI and the tests;
# `make SAN=address,undefined` or `make SAN=thread` builds a sanitized copy
# in its own directory (build/<san>/), so the switches never mix objects.

CC      ?= cc
SAN     ?=
comma   := ,
PREFIX  ?= /usr/local
V       ?= 0
ifeq ($(V),0)
  Q := @
endif

CFLAGS_BASE := -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
               -g -pthread -Iinclude -D_GNU_SOURCE
ifeq ($(SAN),)
  BUILD  := build/release
  CFLAGS_OPT := -O2
else
  BUILD  := build/$(subst $(comma),-,$(SAN))
  CFLAGS_OPT := -O1 -fno-omit-frame-pointer -fsanitize=$(SAN)
  ifneq ($(findstring undefined,$(SAN)),)
    # float-cast-overflow is not part of "undefined": a double from a spec
    # converted to an integer it does not fit is undefined all the same
    CFLAGS_OPT += -fsanitize=float-cast-overflow \
                  -fno-sanitize-recover=undefined,float-cast-overflow
  endif
endif
# x86-64: the 16-byte compare-and-swap of the dirty inbox (cmpxchg16b)
ifeq ($(shell uname -m),x86_64)
  CFLAGS_BASE += -mcx16
endif
override CFLAGS := $(CFLAGS_BASE) $(CFLAGS_OPT) $(EXTRA_CFLAGS)
LDLIBS  := -luring -lpthread -lm
FUSE_CFLAGS = $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS = $(shell pkg-config --libs fuse3 2>/dev/null || echo -lfuse3)

LIB_SRC := $(wildcard src/*.c src/backend/*.c)
LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
LIB     := $(BUILD)/libwbcache.a
TOOL_SRC := $(wildcard tools/*.c)
TOOL_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(TOOL_SRC))
CLI     := $(BUILD)/wbcache
TEST_SRC := $(wildcard tests/*.c)
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%.t,$(TEST_SRC))
BENCH_SRC := $(wildcard bench/*.c)
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all deps check run bench install clean fuzz

all: deps $(LIB) $(CLI) $(TESTS) $(BENCHES)
	@ln -sfn $(notdir $(BUILD)) build/current 2>/dev/null || true

# Installs missing Debian packages when root, else lists them and fails.
deps:
	@scripts/install-deps --check-or-install

$(BUILD)/%.o: %.c $(wildcard include/*.h src/*.h tests/*.h tools/*.h) | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Isrc -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/tools/mount.o: tools/mount.c $(wildcard include/*.h tools/*.h) | deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(FUSE_CFLAGS) -c $< -o $@

$(CLI): $(TOOL_OBJ) $(LIB)
	$(Q)$(CC) $(CFLAGS) $(TOOL_OBJ) $(LIB) $(LDLIBS) $(FUSE_LIBS) -o $@

$(BUILD)/tests/%.t: tests/%.c $(LIB) tests/testutil.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Isrc $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/bench/%: bench/%.c $(LIB) tests/testutil.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Isrc $< $(LIB) $(LDLIBS) -o $@

# The main job: stream 1 GiB through the engine on the file backend.
run: all
	$(CLI) run

check: all
	WBCACHE_BUILD=$(BUILD) tests/run

bench: all
	WBCACHE_BUILD=$(BUILD) bench/stream.sh
	WBCACHE_BUILD=$(BUILD) bench/throttle.sh
	$(BUILD)/bench/isolation
	$(BUILD)/bench/overwrite
	$(BUILD)/bench/manyfiles
	WBCACHE_BUILD=$(BUILD) bench/mount.sh
	WBCACHE_BUILD=$(BUILD) bench/mount_peers.sh

# libFuzzer (clang): FUZZ_TIME seconds; new finds land in build/fuzz/corpus,
# crashes in build/fuzz/crash-*: copy those into tests/fuzz-corpus/, where
# tests/fuzz_regress replays them in every `make check`.  The project's own
# flags (CFLAGS_BASE: warnings, -mcx16 for the inbox's 16-byte CAS), built
# with libFuzzer and the sanitizers instead of the -O2 of a release.
FUZZ_TIME ?= 60
FUZZ_CC   ?= clang
FUZZ_BIN  := build/fuzz/fuzz_ops
FUZZ_CFLAGS := $(CFLAGS_BASE) -O1 -fno-omit-frame-pointer \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
               $(EXTRA_CFLAGS)

$(FUZZ_BIN): $(LIB_SRC) fuzz/fuzz_ops.c $(wildcard include/*.h src/*.h tests/fuzz_ops.h) | deps
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs clang: scripts/install-deps (as root)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Isrc $(LIB_SRC) fuzz/fuzz_ops.c $(LDLIBS) -o $@

fuzz: $(FUZZ_BIN)
	@mkdir -p build/fuzz/corpus
	$(FUZZ_BIN) -max_total_time=$(FUZZ_TIME) -artifact_prefix=build/fuzz/ \
		build/fuzz/corpus tests/fuzz-corpus

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/wbcache
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libwbcache.a
	install -m 644 include/wbcache.h $(DESTDIR)$(PREFIX)/include/wbcache.h
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/

clean:
	rm -rf build
