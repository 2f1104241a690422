/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef EXS_QPATTR_H
#define EXS_QPATTR_H
#include <errno.h>
#include <infiniband/verbs.h>
#include "exs_control.pb-c.h"

/* dgid16: 16 bytes of storage that must outlive `m` */
void exs_qpattr_from_ibv(const struct ibv_qp_attr *a, int mask, ExsCtl__QpAttr *m, uint8_t *dgid16);
int exs_qpattr_to_ibv(const ExsCtl__QpAttr *m, struct ibv_qp_attr *a, int *ret_mask);
/* a copy of `m` that outlives it: its integers, without its GID and the
 * fields it carried that this version does not know */
void exs_qpattr_scalars(ExsCtl__QpAttr *dst, const ExsCtl__QpAttr *m);
#endif
