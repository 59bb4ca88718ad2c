/* SPDX-License-Identifier: MIT */
/*
 * The registry of built-in policies. A new policy is one file under
 * pager/policy/ plus one line in kvt_policies[]; nothing else changes.
 */
#include <string.h>

#include "pager/policy.h"

const struct kvt_policy_ops *const kvt_policies[] = {
	&kvt_policy_lru,
	&kvt_policy_clock,
	&kvt_policy_mru,
	&kvt_policy_lifo,
	&kvt_policy_fifo,
	&kvt_policy_lfu,
	&kvt_policy_sieve,
	&kvt_policy_s3fifo,
	&kvt_policy_2q,
	&kvt_policy_slru,
	&kvt_policy_arc,
	NULL,
};

/* The policy whose name equals spec up to its first ':' (or its end);
 * NULL for an unknown name, an empty name or a NULL spec. */
const struct kvt_policy_ops *kvt_policy_find(const char *spec)
{
	size_t len;

	if (!spec)
		return NULL;
	len = strcspn(spec, ":");
	for (const struct kvt_policy_ops *const *p = kvt_policies; *p; p++)
		if (strlen((*p)->name) == len && !memcmp((*p)->name, spec, len))
			return *p;
	return NULL;
}

/* What follows the first ':' in spec, or "" when there is no ':'. The
 * result points into spec (or at a static ""), so it lives as long as spec. */
const char *kvt_policy_params(const char *spec)
{
	const char *c = spec ? strchr(spec, ':') : NULL;

	return c ? c + 1 : "";
}
