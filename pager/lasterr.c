/* SPDX-License-Identifier: MIT */
/*
 * The last page lost, and why: a lost page reaches its reader as -EIO,
 * which says nothing of the checksum, the tier or the offset. The pager
 * records them here when it gives a page up, under its lock; callers read
 * them back after the -EIO (kvt_pager_last_error).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pager/internal.h"

/* What a cause is called in the message. */
static const char *cause_text(int cause, char *buf, size_t len)
{
	switch (cause) {
	case -EBADMSG: return "checksum mismatch";
	case -ENODATA: return "short read (the file ends early)";
	default:
		snprintf(buf, len, "read error (%s)", strerror(-cause));
		return buf;
	}
}

/* Record that page `page` (r: its sequence, layer, index) was lost when
 * reading `bytes` at `offset` of tier `tier` failed with cause (-errno).
 * Lock held. */
void kvt_lasterr_read(struct kvt_pager *p, int cause, int tier, uint64_t offset,
		      uint32_t bytes, uint32_t page, const struct kvt_ref *r)
{
	uint64_t count = p->lasterr.count;

	p->lasterr = (struct kvt_pager_error){
		.cause = cause ? cause : -EIO, .tier = tier, .offset = offset,
		.bytes = bytes, .page = page, .seq = r->seq, .layer = r->layer,
		.index = r->index, .step = p->step, .count = count + 1,
	};
}

KVT_API int kvt_pager_last_error(struct kvt_pager *p, struct kvt_pager_error *e,
				 char *buf, size_t len)
{
	struct kvt_pager_error x;
	char why[96];

	pthread_mutex_lock(&p->lock);
	x = p->lasterr;
	pthread_mutex_unlock(&p->lock);
	if (e)
		*e = x;
	if (buf && len) {
		if (!x.cause)
			buf[0] = 0;
		else
			snprintf(buf, len, "page %u (seq %u, layer %u, index %u) lost: %s reading "
				 "tier %s at offset %llu (%u bytes)", x.page, x.seq, x.layer,
				 x.index, cause_text(x.cause, why, sizeof(why)),
				 kvt_tier_name(x.tier), (unsigned long long)x.offset, x.bytes);
	}
	return x.cause;
}
