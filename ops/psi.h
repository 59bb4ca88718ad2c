/* SPDX-License-Identifier: MIT */
/*
 * The memory-pressure watcher (psi.*): a thread that reads psi.path and
 * hands each reading to the pager's pressure hook. Private to ops/.
 */
#ifndef KVT_OPS_PSI_H
#define KVT_OPS_PSI_H

struct kvt_pager;
struct kvt_psi;

/* Start watching for p, with p's psi.path, psi.interval_ms and
 * psi.threshold (ops/open.c: at open, when psi.threshold > 0 and psi.path
 * is set). 0 and *out, or -errno. */
int  kvt_psi_start(struct kvt_pager *p, struct kvt_psi **out);
/* Stop the thread and free w (NULL: nothing). */
void kvt_psi_stop(struct kvt_psi *w);
/* "some avg10=X ..." of the text in buf: 0 and *avg10, or -EINVAL. */
int  kvt_psi_parse(const char *buf, double *avg10);

#endif
