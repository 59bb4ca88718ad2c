/* SPDX-License-Identifier: MIT */
/*
 * The version of libkvt. One number for the library, its headers, the
 * tools and the policy plug-in interface's documentation: the Makefile
 * reads it from here (the shared object's name, libkvt.pc, the man pages).
 *
 * KVT_VERSION_* say which headers a program was compiled against;
 * kvt_version() says which library it runs with. A program built against
 * one minor version runs with any later one of the same major version
 * (libkvt.so.MAJOR is the soname).
 */
#ifndef KVT_VERSION_H
#define KVT_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_VERSION_MAJOR	0
#define KVT_VERSION_MINOR	1
#define KVT_VERSION_PATCH	0
#define KVT_VERSION_STRING	"0.1.0"
/* One number to compare: major * 10000 + minor * 100 + patch. */
#define KVT_VERSION		(KVT_VERSION_MAJOR * 10000 + KVT_VERSION_MINOR * 100 + \
				 KVT_VERSION_PATCH)

/* The version of the library the program runs with, "MAJOR.MINOR.PATCH":
 * KVT_VERSION_STRING as the library was built. A static string. */
const char *kvt_version(void);

#ifdef __cplusplus
}
#endif
#endif
