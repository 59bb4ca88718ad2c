/* SPDX-License-Identifier: MIT */
/*
 * kvt-demo --json: stdout holds one JSON object and nothing else (what the
 * demo says on the way goes to stderr), so `kvt-demo --json | jq` works;
 * without --json the same lines are on stdout, before the tier table.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common.h"

static char out[1 << 16];

/* A shell command; its output into out; its exit status (tests/common.h). */
#define run(...) t_shell(out, sizeof(out), __VA_ARGS__)

/* s is one JSON object, then one newline, then nothing: the braces and
 * brackets outside strings balance and close exactly at the end. */
static int one_json_line(const char *s)
{
	int depth = 1, str = 0;

	if (*s++ != '{')
		return 0;
	for (; *s; s++) {
		if (!depth)
			return *s == '\n' && !s[1];
		if (*s == '\n')
			return 0;	/* a line break inside the object */
		if (str) {
			if (*s == '\\' && s[1])
				s++;
			else if (*s == '"')
				str = 0;
		} else if (*s == '"') {
			str = 1;
		} else if (*s == '{' || *s == '[') {
			depth++;
		} else if (*s == '}' || *s == ']') {
			depth--;
		}
	}
	return 0;	/* cut short, or no newline at the end */
}

int main(void)
{
	const char *build = getenv("BUILD"), *tdir = getenv("KVT_TEST_DIR");
	char bin[1024], args[1200];

	snprintf(bin, sizeof(bin), "%s/kvt-demo", build && *build ? build : "build");
	if (access(bin, X_OK))
		SKIP("%s not built", bin);
	snprintf(args, sizeof(args), "-t 512 -s 2 -l 2 --fast 1M --host 1M --nvme 16M --device cpu "
		 "--dir %s", tdir && *tdir ? tdir : "/tmp");

	CHECK_EQ(run("%s %s --json 2>/dev/null", bin, args), 0);
	if (!one_json_line(out)) {
		fprintf(stderr, "kvt-demo --json: stdout is not one JSON object on one line:\n%.2000s\n", out);
		return 1;
	}
	CHECK(strstr(out, "\"tiers\":{\"fast\":{"));
	/* the lines it says are on stderr */
	CHECK_EQ(run("%s %s --json 2>&1 >/dev/null", bin, args), 0);
	CHECK(strstr(out, "kvt-demo: 2 layers x 8 KV heads") && strstr(out, "\ncontext 512 tokens"));
	/* without --json, on stdout */
	CHECK_EQ(run("%s %s 2>/dev/null", bin, args), 0);
	CHECK(!strncmp(out, "kvt-demo: 2 layers x 8 KV heads", 31) &&
	      strstr(out, "mismatches 0\n"));
	return 0;
}
