/* SPDX-License-Identifier: MIT */
/*
 * The configuration (pager/config.c): an INI file (kvt_config_load) and
 * `--set KEY=VALUE` (kvt_config_set, as kvt-run and kvtctl's set pass
 * it). The input is read both ways: as an INI file over the defaults,
 * and as lines KEY=VALUE, each set in turn.
 *
 * Checked: every refusal says why in one line; a configuration that was
 * accepted prints (kvt_config_print), and what it prints, if the
 * configuration passes kvt_config_validate, loads back into the same
 * configuration (printed again, the same text).
 */
#include "tests/fuzz/fuzz.h"
#include <kvt/config.h>

static struct fuzz_file file, printed;

/* print(c), load it over the defaults, print again: the same text. */
static void round_trip(const struct kvt_config *c)
{
	static char a[65536], b[65536];
	struct kvt_config c2;
	char err[512] = "";
	int n, m, r;

	n = kvt_config_print(c, a, sizeof(a));
	FUZZ_CHECK(n >= 0 && (size_t)n < sizeof(a));
	/* Keys set one by one may disagree (kvt_config_set checks each
	 * alone); a file is checked whole, so such a one would not load. */
	if (kvt_config_validate(c, err, sizeof(err))) {
		fuzz_check_err(err, sizeof(err));
		return;
	}
	kvt_config_default(&c2);
	err[0] = 0;
	r = kvt_config_load(&c2, fuzz_file_set(&printed, "printed", a, (size_t)n), err, sizeof(err));
	if (r)
		fprintf(stderr, "the printed configuration does not load: %s\n%s", err, a);
	FUZZ_CHECK(r == 0);
	m = kvt_config_print(&c2, b, sizeof(b));
	FUZZ_CHECK(m == n && !memcmp(a, b, (size_t)n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_config c;
	char err[512] = "", *text, *line;
	int r;

	kvt_config_default(&c);
	r = kvt_config_load(&c, fuzz_file_set(&file, "ini", data, size), err, sizeof(err));
	if (r)
		fuzz_check_err(err, sizeof(err));
	else
		round_trip(&c);

	kvt_config_default(&c);
	text = fuzz_cstr(data, size);
	for (line = text; line; ) {
		char *nl = strchr(line, '\n'), *eq;

		if (nl)
			*nl = 0;
		eq = strchr(line, '=');
		if (eq) {
			*eq = 0;
			err[0] = 0;
			if (kvt_config_set(&c, line, eq + 1, err, sizeof(err)))
				fuzz_check_err(err, sizeof(err));
		}
		line = nl ? nl + 1 : NULL;
	}
	round_trip(&c);
	free(text);
	return 0;
}
