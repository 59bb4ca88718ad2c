/* SPDX-License-Identifier: MIT */
/*
 * kvt_pager_open: the pager core (kvt_pager_open_core), then the operator
 * services its configuration asks for, attached to it so that
 * kvt_pager_close stops them first:
 *
 *   psi.threshold > 0 and psi.path set   the memory-pressure watcher (psi.c)
 *   metrics.http set                     the metrics endpoint (http.c)
 *
 * A service that cannot start fails the open: the reason goes through
 * the log callback and whatever was started is stopped again.
 *
 * Library rules: nothing prints, functions return 0 or -errno.
 */
#include <errno.h>
#include <string.h>

#include <kvt/config.h>
#include <kvt/pager.h>
#include "ops/http.h"
#include "ops/psi.h"
#include "pager/hooks.h"

static void psi_stop(void *w)
{
	kvt_psi_stop(w);
}

static void http_stop(void *h)
{
	kvt_http_stop(h);
}

KVT_API int kvt_pager_open(const struct kvt_config *cfg, struct kvt_device *dev,
			   struct kvt_pager **out)
{
	struct kvt_pager *p;
	char err[256];
	int r;

	r = kvt_pager_open_core(cfg, dev, &p);
	if (r)
		return r;
	if (cfg->psi_threshold > 0 && cfg->psi_path[0]) {
		struct kvt_psi *w;
		r = kvt_psi_start(p, &w);
		if (r) {
			kvt_plog(p, KVT_LOG_ERROR, "psi: cannot start the watcher: %s", strerror(-r));
			goto fail;
		}
		kvt_pager_attach(p, KVT_SVC_PSI, psi_stop, w, 0);
	}
	if (cfg->metrics_http[0]) {
		struct kvt_http *h;
		r = kvt_http_start(p, cfg->metrics_http, &h, err, sizeof(err));
		if (r) {
			kvt_plog(p, KVT_LOG_ERROR, "%s", err);
			goto fail;
		}
		kvt_pager_attach(p, KVT_SVC_HTTP, http_stop, h, kvt_http_port(h));
	}
	*out = p;
	return 0;
fail:
	/* Nobody else has p: it holds no batch, so it closes. */
	kvt_pager_close(p);
	return r;
}
