/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What the contract headers need to compile as BPF C, C and C++ alike. */
#ifndef INCXDP_COMPILER_H
#define INCXDP_COMPILER_H

#ifdef __cplusplus
#define INCXDP_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define INCXDP_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#endif
