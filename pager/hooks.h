/* SPDX-License-Identifier: MIT */
/*
 * What the operator layer (ops/: control socket, metrics endpoint,
 * memory-pressure watcher, metrics text) may use of the pager core beyond
 * the public headers, and nothing more. Of the project, ops/ includes
 * this header, the public ones (include/kvt/) and pager/out.h (a leaf:
 * snprintf into a caller's buffer, shared with the JSON of stats.c) only;
 * no core file includes a header of ops/ (tests/t_layers.sh checks both),
 * so the dependency runs one way: the core offers these hooks, ops
 * registers with them.
 *
 * Not installed.
 */
#ifndef KVT_PAGER_HOOKS_H
#define KVT_PAGER_HOOKS_H

#include <stddef.h>

#include <kvt/config.h>
#include <kvt/pager.h>

#include "pager/build.h"	/* kvt_build_get: the kvt_build_info metric */

#ifndef KVT_API
#define KVT_API __attribute__((visibility("default")))
#endif

/* The pager without its operator services: everything kvt_pager_open
 * (ops/open.c) does but start them. Same contract: 0 and *out, or -errno
 * with the reason through cfg->log. kvt_pager_close closes it. */
int  kvt_pager_open_core(const struct kvt_config *cfg, struct kvt_device *dev,
			 struct kvt_pager **out);

/* Services that run beside a pager, one of each kind at most. */
enum kvt_service {
	KVT_SVC_PSI,		/* the memory-pressure watcher: kvt_stats.psi_watching */
	KVT_SVC_HTTP,		/* the metrics endpoint: kvt_stats.metrics_http_port */
	KVT_NSVC
};

/* Attach a service to p: kvt_pager_close (once it is sure to close) calls
 * stop(arg) before anything else of the pager stops, the services in
 * reverse order of kind, so a service may use the public API until its
 * stop returns. port is what kvt_stats.metrics_http_port reports for
 * KVT_SVC_HTTP (ignored for the others). Between kvt_pager_open_core and
 * handing p out (kvt_pager_open); takes the pager lock, as a service
 * already running may read the stats. */
void kvt_pager_attach(struct kvt_pager *p, enum kvt_service kind, void (*stop)(void *arg),
		      void *arg, int port);

/* The memory-pressure hook: one reading of psi.path by the watcher.
 * r: 0, or the -errno of a reading that failed (the pager then runs as if
 * there were no pressure); avg10: the "some avg10" read, per cent;
 * triggered: the kernel's trigger fired. While avg10 is at or above
 * psi.threshold (or triggered) the host tier's limit comes down an eighth
 * of the way between tier.host.bytes and tier.host.floor, to the floor;
 * once avg10 is below half the threshold it goes back up as much, to
 * tier.host.bytes. Never below what the pinned pages and the pages with
 * nowhere else to go need. Takes the pager lock; counts in kvt_stats
 * (psi_ok, psi_some_avg10, psi_shrinks, psi_grows, host_limit_bytes). */
void kvt_pager_pressure(struct kvt_pager *p, int r, double avg10, int triggered);

/* One message through the configured log callback, if any. */
void kvt_plog(struct kvt_pager *p, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* metrics.http's value: "HOST:PORT" with HOST 127.x.y.z, localhost or
 * [::1] and PORT 0..65535 (0: any free port). 0 with the address in
 * addr (network order: 4 bytes, or 16 when *v6) and *port, or -EINVAL
 * with why (one line naming the key and what is wrong): anything but a
 * loopback address is refused. The config table checks the key with it;
 * ops/http.c binds what it returns. */
int  kvt_config_http_addr(const char *s, unsigned char addr[16], int *v6, unsigned *port,
			  char *why, size_t whylen);

#endif
