/* SPDX-License-Identifier: MIT */
/*
 * The registry of built-in policies. A new policy is one file under
 * pager/policy/ defining `const struct kvt_policy_ops kvt_policy_NAME`;
 * the build lists it in policies.h, so nothing else changes.
 */
#include <string.h>

#include "pager/policy.h"

const struct kvt_policy_ops *const kvt_policies[] = {
#define KVT_POLICY(sym) &sym,
#include "policies.h"
#undef KVT_POLICY
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
