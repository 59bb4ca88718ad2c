/* SPDX-License-Identifier: MIT */
/*
 * The control protocol (ops/control.c): the input is one client's
 * stream of request lines, answered by kvt_control_feed against a live
 * pager on tiny tiers (pager_rig.h), as the socket's thread answers it.
 *
 * Inputs holding a '/' are skipped: "trace start /PATH" would create
 * files wherever the fuzzer points, and a policy named by a path would
 * load it as a plug-in. The relative-path refusal of trace start and
 * everything else the protocol does stay in reach.
 *
 * Checked: the reply is a sequence of replies each ending in a line "."
 * (no more replies than complete request lines), and every reply line
 * that starts with "." is either the terminator or dot-stuffed.
 */
#include "tests/fuzz/pager_rig.h"
#include "ops/control.h"

static void check_reply(const char *out, size_t len, size_t lines)
{
	size_t replies = 0;

	if (!out)
		return;
	FUZZ_CHECK(len == 0 || out[len - 1] == '\n');
	for (const char *l = out; l < out + len; ) {
		const char *nl = memchr(l, '\n', (size_t)(out + len - l));

		FUZZ_CHECK(nl);
		if (nl == l + 1 && l[0] == '.')
			replies++;
		else if (l[0] == '.')
			FUZZ_CHECK(nl > l + 1 && l[1] == '.');
		l = nl + 1;
	}
	FUZZ_CHECK(replies <= lines);
	FUZZ_CHECK(len == 0 || (len >= 2 && !memcmp(out + len - 2, ".\n", 2) &&
				(len == 2 || out[len - 3] == '\n')));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rig r;
	char *out;
	size_t len, lines = 0;

	if (memchr(data, '/', size))
		return 0;
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	if (!r.p)
		rig_open(&r);
	FUZZ_CHECK(kvt_control_feed(r.p, (const char *)data, size, &out, &len) == 0);
	check_reply(out, len, lines);
	free(out);
	rig_reset(&r);
	return 0;
}
