/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * struct ibv_qp_attr <-> ExsCtl__QpAttr, the one place the control
 * protocol's QP attribute fields are mapped. exsd fills them from
 * rdma_init_qp_attr(); libexs applies them with ibv_modify_qp().
 */
#include <string.h>

#include "exs_qpattr.h"

void exs_qpattr_from_ibv(const struct ibv_qp_attr *a, int mask, ExsCtl__QpAttr *m, uint8_t *dgid16)
{
	exs_ctl__qp_attr__init(m);
	m->mask = (uint32_t)mask;
	m->qp_state = a->qp_state;
	m->qp_access_flags = a->qp_access_flags;
	m->pkey_index = a->pkey_index;
	m->port_num = a->port_num;
	m->path_mtu = a->path_mtu;
	m->dest_qp_num = a->dest_qp_num;
	m->rq_psn = a->rq_psn;
	m->sq_psn = a->sq_psn;
	m->max_dest_rd_atomic = a->max_dest_rd_atomic;
	m->max_rd_atomic = a->max_rd_atomic;
	m->min_rnr_timer = a->min_rnr_timer;
	m->timeout = a->timeout;
	m->retry_cnt = a->retry_cnt;
	m->rnr_retry = a->rnr_retry;
	m->qkey = a->qkey;
	m->ah_dlid = a->ah_attr.dlid;
	m->ah_sl = a->ah_attr.sl;
	m->ah_src_path_bits = a->ah_attr.src_path_bits;
	m->ah_static_rate = a->ah_attr.static_rate;
	m->ah_is_global = a->ah_attr.is_global;
	m->ah_port_num = a->ah_attr.port_num;
	memcpy(dgid16, a->ah_attr.grh.dgid.raw, 16);
	m->grh_dgid.data = dgid16;
	m->grh_dgid.len = 16;
	m->grh_flow_label = a->ah_attr.grh.flow_label;
	m->grh_sgid_index = a->ah_attr.grh.sgid_index;
	m->grh_hop_limit = a->ah_attr.grh.hop_limit;
	m->grh_traffic_class = a->ah_attr.grh.traffic_class;
}

int exs_qpattr_to_ibv(const ExsCtl__QpAttr *m, struct ibv_qp_attr *a, int *ret_mask)
{
	if (m->grh_dgid.len != 0 && m->grh_dgid.len != 16)
		return -EINVAL;
	if (m->qp_state > IBV_QPS_ERR || m->mask > (1u << 30))
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	a->qp_state = m->qp_state;
	a->qp_access_flags = m->qp_access_flags;
	a->pkey_index = (uint16_t)m->pkey_index;
	a->port_num = (uint8_t)m->port_num;
	a->path_mtu = m->path_mtu;
	a->dest_qp_num = m->dest_qp_num;
	a->rq_psn = m->rq_psn;
	a->sq_psn = m->sq_psn;
	a->max_dest_rd_atomic = (uint8_t)m->max_dest_rd_atomic;
	a->max_rd_atomic = (uint8_t)m->max_rd_atomic;
	a->min_rnr_timer = (uint8_t)m->min_rnr_timer;
	a->timeout = (uint8_t)m->timeout;
	a->retry_cnt = (uint8_t)m->retry_cnt;
	a->rnr_retry = (uint8_t)m->rnr_retry;
	a->qkey = m->qkey;
	a->ah_attr.dlid = (uint16_t)m->ah_dlid;
	a->ah_attr.sl = (uint8_t)m->ah_sl;
	a->ah_attr.src_path_bits = (uint8_t)m->ah_src_path_bits;
	a->ah_attr.static_rate = (uint8_t)m->ah_static_rate;
	a->ah_attr.is_global = (uint8_t)m->ah_is_global;
	a->ah_attr.port_num = (uint8_t)m->ah_port_num;
	if (m->grh_dgid.len == 16)
		memcpy(a->ah_attr.grh.dgid.raw, m->grh_dgid.data, 16);
	a->ah_attr.grh.flow_label = m->grh_flow_label;
	a->ah_attr.grh.sgid_index = (uint8_t)m->grh_sgid_index;
	a->ah_attr.grh.hop_limit = (uint8_t)m->grh_hop_limit;
	a->ah_attr.grh.traffic_class = (uint8_t)m->grh_traffic_class;
	*ret_mask = (int)m->mask;
	return 0;
}

void exs_qpattr_scalars(ExsCtl__QpAttr *dst, const ExsCtl__QpAttr *m)
{
	*dst = *m;
	dst->grh_dgid = (ProtobufCBinaryData){ 0, NULL };
	dst->base.unknown_fields = NULL;
	dst->base.n_unknown_fields = 0;
}
