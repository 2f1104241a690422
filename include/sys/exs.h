/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The ES-API standard names <sys/exs.h>; UNH EXS and this library use <exs.h>. */
#include <exs.h>
