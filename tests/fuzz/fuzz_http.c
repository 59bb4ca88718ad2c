/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint's request parser (ops/http.c): the input is
 * what one client sends, answered by kvt_http_feed against a live pager
 * on tiny tiers (pager_rig.h), as the server's thread answers it.
 *
 * Checked: a reply, when there is one, is a whole HTTP/1.1 response: a
 * status line, headers ending in a blank line, Content-Length equal to
 * the body's length (0 sent for HEAD), Connection: close; and 200 only
 * for GET or HEAD of /metrics.
 */
#include "tests/fuzz/pager_rig.h"
#include "ops/http.h"

static void check_reply(const uint8_t *req, size_t reqlen, const char *out, size_t len)
{
	char *s = fuzz_cstr((const uint8_t *)out, len), *hend, *cl;
	unsigned long blen;

	FUZZ_CHECK(strlen(s) == len);
	FUZZ_CHECK(!strncmp(s, "HTTP/1.1 ", 9));
	hend = strstr(s, "\r\n\r\n");
	FUZZ_CHECK(hend);
	*hend = 0;
	FUZZ_CHECK(strstr(s, "\r\nConnection: close"));
	cl = strstr(s, "\r\nContent-Length: ");
	FUZZ_CHECK(cl);
	blen = strtoul(cl + 18, NULL, 10);
	int head = reqlen >= 5 && !memcmp(req, "HEAD ", 5);
	FUZZ_CHECK(len - (size_t)(hend + 4 - s) == (head && !strncmp(s + 9, "200", 3) ? 0 : blen));
	if (!strncmp(s + 9, "200", 3))
		FUZZ_CHECK((reqlen >= 13 && !memcmp(req, "GET /metrics", 12)) ||
			   (reqlen >= 14 && !memcmp(req, "HEAD /metrics", 13)));
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rig r;
	char *out;
	size_t len;

	if (!r.p)
		rig_open(&r);	/* the parser changes nothing in the pager */
	FUZZ_CHECK(kvt_http_feed(r.p, (const char *)data, size, &out, &len) == 0);
	if (out)
		check_reply(data, size, out, len);
	free(out);
	return 0;
}
