/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Constants of the control protocol defined in exs_control.proto. */
#ifndef EXS_CONTROL_H
#define EXS_CONTROL_H
#include "exs_control.pb-c.h"

#define EXS_CTL_VERSION 3          /* see the history in exs_control.proto */
#define EXS_CTL_MAX_MSG 4096       /* bytes in one datagram, either way */
#define EXS_CTL_DEFAULT_SOCKET "/run/exs/exsd.sock"
#define EXS_CTL_STATS_BATCH 40     /* SockStats per StatsReply: fits EXS_CTL_MAX_MSG */
#endif
