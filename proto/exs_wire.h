/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The EXS wire protocol: what crosses the network between two hosts. This
 * header is its one definition; exsd and libexs both build from it.
 *
 * Version history (EXS_WIRE_VERSION):
 *   1  (2026-11-22) setup request/response in CM private data; adverts,
 *      RDMA WRITE_WITH_IMM placement, WRITE + DONE placement, FIN, ABORT.
 *   2  (2026-11-22) setup field stream_buf; ADVERT flag WAITALL and
 *      MORE (MSG_WAITALL on streams); RDSHUT and RDSHUT_ACK (exs_shutdown
 *      SHUT_RD); PING and PONG (is the peer alive after a CM
 *      disconnect?); HELLO (on iWARP the active side sends first, MPA).
 *   3  (2026-11-23) SOCK_SEQPACKET small messages without an advert round
 *      trip: EAGER (data in a SEND, into the receiver's posted receive
 *      buffers), RTS, CREDIT; every message carries returned eager
 *      credits; ADVERT carries its receive's number (seq). Message layout
 *      changed (slot 16 bits, lost 32 bits). SOCK_STREAM's stream buffer
 *      (part 4): EAGER chunks; ADVERT.seq is the chunks received.
 *   4  (2026-11-25) part 4: only a send of at most one chunk goes into
 *      the stream buffer; a longer one waits for an advert and asks for
 *      it with RTS {seq = chunks sent}, which takes an eager credit.
 *      Receives of at most a chunk are advertised only after an RTS, and
 *      a chunk no longer makes the receiver advertise its waiting
 *      receives again (on rxe a run of small sends cost an advert per
 *      waiting receive per chunk, and 64 KiB sends went as 16 chunks).
 *      exs_cancel of an advertised receive: UNADVERT and UNADVERT_ACK;
 *      EXS_WIRE_SPARE 10 -> 12 (room for one of each). (Version 3 never
 *      shipped in a release; both changes of that day are one version.)
 *   5  (2026-11-25) part 6: persistent sends and receives (EXS_PERSISTENT,
 *      exs_send_offset, exs_recv_offset): PERSIST, UNPERSIST,
 *      UNPERSIST_ACK, REFUSE, READ_DONE, READ_CREDIT; the receiver of a
 *      persistent send fetches it by RDMA READ. Each side keeps C more
 *      receives posted (READ_DONEs); EXS_WIRE_SPARE 12 -> 20.
 *
 * 1. Setup, carried by exsd in rdmacm private data (all fields big-endian).
 *    The active side's exsd sends a request in rdma_connect(); the passive
 *    side's exsd answers in rdma_accept() with the minimum of each field
 *    (guide §6.2), or rejects with a struct exs_wire_reject whose `err` is
 *    an errno (EPROTONOSUPPORT on a version mismatch, ECONNREFUSED when
 *    nobody accepts). 24 bytes fit the smallest limit, IB CM REQ's 56.
 *    A request's `wait_ms` is how long the connecting side still waits
 *    for the accept when it sends the request (what is left of its
 *    exs_connect timeout), 0 for no limit. The passive exsd drops a
 *    request not accepted by then: no transport tells the passive side
 *    that the connecting side gave up (rxe and siw were seen not to). It
 *    was a reserved field, sent as 0, so it needs no new version.
 *
 * 2. Data path, run by libexs on an RC QP (all fields little-endian, the
 *    byte order of every verbs host we target; checked at build time is
 *    only the size). Every control message is one SEND of a
 *    struct exs_wire_msg.
 *    - The receiver's exs_recv() takes a recv credit and SENDs an ADVERT
 *      {slot, addr, rkey, len}: `slot` names its receive operation.
 *    - The sender matches its oldest pending exs_send() with the oldest
 *      ADVERT and places min(send, advert) bytes straight into the
 *      receiver's buffer:
 *        a. IMM mode (InfiniBand, RoCE): one RDMA WRITE_WITH_IMM, imm =
 *           slot; the receiver completes the slot with the WC's byte_len.
 *        b. DONE mode (iWARP, which has no WRITE_WITH_IMM, and any
 *           SEQPACKET truncation): RDMA WRITE, then a SEND of DONE {slot,
 *           len, lost}; RC ordering puts the data in place before DONE.
 *      For SOCK_SEQPACKET the excess of a longer send is dropped and
 *      reported as `lost` (guide §5.4.2).
 *    - ADVERT with flags & EXS_WIRE_ADV_WAITALL (SOCK_STREAM receive with
 *      MSG_WAITALL): a send shorter than the advert does not use it up;
 *      the advert stays first in line with addr/len advanced and is held:
 *      nothing more is placed (there or in later adverts) until the
 *      receiver answers the piece with MORE {slot}. The receiver sums what
 *      each IMM/DONE reports and completes the receive when full (or at
 *      FIN). So at most one IMM/DONE per advert is ever unanswered.
 *    - FIN: the sender will send nothing more (exs_close / SHUT_WR); the
 *      receiver completes every later receive with length 0, errno 0.
 *    - ABORT: exs_close with EXS_DONTLINGER; the receiver fails all pending
 *      and future operations with ECONNRESET.
 *    - HELLO (iWARP only): the active side's first message, sent as soon
 *      as its connection is established. The passive side sends nothing
 *      (its ADVERTs, FIN, ABORT, RDSHUT wait) until HELLO has arrived: MPA
 *      lets the responder send FPDUs only after the initiator's first
 *      one, and an FPDU that reaches the initiator before its MPA reply is
 *      processed fails the connection there (siw: CONNECT_ERROR EINVAL).
 *    - RDSHUT: exs_shutdown(SHUT_RD); the receiver of it drops the adverts
 *      it holds, fails its unplaced and future sends with EPIPE (one
 *      placed in part once the ACK, posted after its writes, completes)
 *      and answers RDSHUT_ACK, after which it writes nothing more. On the ACK
 *      the shut side completes its waiting receives with what they hold
 *      (length 0: EOF). Receives started after SHUT_RD are EOFs at once.
 *    - UNADVERT {slot}: exs_cancel of a receive whose ADVERT went out. The
 *      receiver may not reuse that buffer (or the slot) yet: the sender
 *      may be writing there. The sender drops the advert if it still holds
 *      it (also one held for MORE: then no MORE follows) and answers
 *      UNADVERT_ACK {slot}; anything it placed there before was posted
 *      before the ACK, so RC ordering brings it (IMM or DONE) first. On
 *      the ACK the receiver completes the receive with what it got, or
 *      ECANCELED if nothing, and only then frees its slot. At most one
 *      UNADVERT per connection and direction is unanswered (further
 *      cancels wait their turn), and each side answers at once, so one
 *      receive and one control send slot of EXS_WIRE_SPARE cover each.
 *      A FIN, RDSHUT_ACK or ABORT ends the wait too (the sender writes
 *      nothing more after it), so an ACK for no cancel is ignored once
 *      the receive direction is no longer open. SOCK_SEQPACKET receives
 *      are numbered: an advertised one is not cancelled (EBUSY), nor a
 *      quiet one with an advertised receive after it (the numbers of
 *      later receives shift down by one when a quiet one is cancelled).
 *    - PING: sent when a CM disconnect arrives without a FIN (the peer's
 *      exsd may only have restarted: on IB/RoCE the QPs belong to the
 *      applications and still work); the peer answers PONG at once. No
 *      PONG within 1 s (or a failed QP) means the peer is gone:
 *      ECONNRESET. Not used on iWARP, whose connection is the CM's.
 *    Credits: both sides use the negotiated `credits` C for both
 *    directions. Each side keeps 2C + EXS_WIRE_SPARE receives posted
 *    (at most one unanswered advert or MORE per peer receive, one IMM/DONE
 *    per own advert, and HELLO, FIN, ABORT, RDSHUT, RDSHUT_ACK, PING, PONG,
 *    RTS, two CREDITs, UNADVERT and UNADVERT_ACK, and per direction of
 *    part 6 a PERSIST, UNPERSIST, UNPERSIST_ACK, REFUSE and READ_CREDIT),
 *    C more for READ_DONEs (part 6), plus C more when small messages are
 *    on (below).
 *
 * 3. Small messages (SOCK_SEQPACKET with a negotiated sp_max S > 0, guide
 *    §7.2). Messages and receives are numbered from 0 on each side; the
 *    k-th message fills the k-th receive. A message of at most S bytes
 *    (and at most EXS_WIRE_EAGER_MAX) goes as EAGER: one SEND of struct exs_wire_eager {seq = k} followed by
 *    the data, inline when it fits, into whatever receive buffer the peer
 *    has posted (every receive buffer holds 8 + S bytes). It costs one
 *    eager credit; the sender starts with C. The receiver copies the data
 *    into receive k if that is posted, else keeps it (at most C messages)
 *    until receive k is, and returns the credit in the `credits` field of
 *    its next message of any type (EAGER or exs_wire_msg), or in a CREDIT
 *    once C/2 (at least 1) are owed. A receive of at most S bytes is not
 *    advertised; a longer one is, with ADVERT.seq = its number. A message
 *    longer than S needs the ADVERT of its receive: when it is first in
 *    line and that advert has not come, the sender SENDs RTS {seq = k}
 *    (once) and the receiver advertises receive k, however small, now or
 *    when it is posted. The sender drops adverts numbered below its next
 *    message (their receives were filled by EAGER). An EAGER send's
 *    completion is reported when the SEND is posted: its data are the
 *    device's then (inline) or a copy in the sender's eager buffer, which
 *    is not reused before the SEND has completed.
 *
 * 4. The stream buffer (SOCK_STREAM with a negotiated stream_buf B > 0,
 *    guide §7.6). Chunk size K = min(B, EXS_WIRE_EAGER_MAX) on both sides;
 *    every receive buffer holds 8 + K bytes, C more are posted, and the
 *    sender starts with C eager credits, as in part 3. The sender places
 *    into adverts as in part 2 while it holds one. While it holds none:
 *    - if its oldest send has at most K bytes left (and it has a credit),
 *      it SENDs them as EAGER {seq = chunks sent before}: the peer's
 *      buffer is the stream buffer, C chunks of K bytes. A chunk holds
 *      stream bytes, not sends: the sender may put several small sends
 *      into one (coalescing, libexs's conn.c cork_add), and the receiver
 *      cannot tell;
 *    - else it waits for an advert, placed without a copy, and SENDs one
 *      RTS {seq = chunks sent} (taking an eager credit, returned as a
 *      chunk's is) unless it sent one and no chunk since.
 *    ADVERT.seq is the number of chunks the receiver had taken when it
 *    advertised; the sender drops, on arrival, an advert whose seq is not
 *    its own chunk count (a chunk crossed it). The receiver advertises its
 *    waiting receives oldest first and stops at the first that lacks at
 *    most K bytes, unless the peer's RTS came and no chunk since: then it
 *    advertises every waiting receive. It does so when a receive is
 *    posted and when an RTS comes. On a chunk the
 *    receiver takes every waiting receive's advert as void, copies the
 *    chunk into its waiting receives in order (each completes with what it
 *    got, unless MSG_WAITALL and not full) and keeps the rest; it does not
 *    advertise again for it (a sender with a longer send asks by RTS). A
 *    new receive takes kept bytes first and is advertised (as above) only
 *    if it still wants data. A chunk's credit is returned once its bytes
 *    are all read, as in part 3. A send completes when its last byte is
 *    placed or copied into a chunk (one whose first bytes were placed
 *    completes with its chunk's SEND, after their writes: no wire change).
 *
 * 5. Scatter/gather (exs_sendmsg, exs_recvmsg; no new message, no new
 *    version: a peer cannot tell a gathered send from any other). The
 *    sender places a piece of a send of several local segments as in
 *    part 2, into the one region its advert names, with RDMA WRITEs that
 *    each gather up to the QP's max_send_sge segments (and max_msg_sz
 *    bytes). A piece that needs more than one write goes in DONE mode
 *    (2b) on every transport: a WRITE_WITH_IMM's byte_len would tell only
 *    its own write's length. EAGER messages and chunks (parts 3, 4) are
 *    copied from the segments. A receive into several segments advertises
 *    one region, a library buffer, and is copied into the segments when it
 *    completes: SEQPACKET's one message, one receive holds unchanged.
 *
 * 6. Persistent transfers (SOCK_SEQPACKET only; seed 000 §4.2-4.4). A
 *    direction (say A to B) has at most one of: A's persistent send, or
 *    B's persistent receive. Either starts only when its side has nothing
 *    else of that direction under way (sends; or receives and kept small
 *    messages), and its side takes no other such operation until it ends.
 *    The two directions are independent.
 *    - PERSIST {flags, addr, rkey, len}: flags & EXS_WIRE_PST_RECV: B's
 *      persistent receive, a region A may RDMA WRITE (rkey with remote
 *      write); else A's persistent send, a region B may RDMA READ (an MR
 *      with remote read over exactly that block, registered for it).
 *      EXS_WIRE_PST_NOTIFY (a send's only): B answers each READ with
 *      READ_DONE. len > 0; no other flag. A PERSIST for a direction that
 *      already has one of the peer's is a protocol error.
 *    - A's persistent send in effect at B: every receive B posts (oldest
 *      first) is filled by RDMA READs of min(its length, len) bytes from
 *      the block's start, exs_recv_offset's from its offset (B checks the
 *      range against len before anything moves); the receive completes
 *      when its READ does. Receives waiting when PERSIST arrives are read
 *      too (their adverts are void: A drops every ADVERT while it
 *      persists) and B's receive count restarts at its message count less
 *      the small messages it keeps (A sends nothing while it persists);
 *      those kept messages still go to B's next receives first.
 *    - NOTIFY: after each READ, B SENDs READ_DONE {len = bytes read}. B
 *      has at most C READ_DONEs not yet credited; A returns them with
 *      READ_CREDIT {len = how many} once C/2 (at least 1) are owed.
 *    - B's persistent receive in effect at A: every send A places (oldest
 *      first) goes as RDMA WRITEs of min(its length, len) bytes to the
 *      block's start (exs_send_offset's at its offset) and completes when
 *      they do; B learns nothing of it. EAGER messages A sent before
 *      PERSIST arrived are copied by B to the block's start, in order; an
 *      RTS is void (A writes that send).
 *    - REFUSE {flags}: the peer's PERSIST (flags & EXS_WIRE_PST_RECV say
 *      which) met one of our own for the same direction (the two crossed):
 *      it is not used. Both sides refuse, so both fail (EBUSY).
 *    - UNPERSIST {flags}: exs_cancel, or the close, of the persistent
 *      send (flags 0) or receive (EXS_WIRE_PST_RECV). Its owner keeps the
 *      block registered until UNPERSIST_ACK {flags}; the peer answers once
 *      nothing of its own touches the block any more: a writer at once
 *      (its WRITEs went first, RC order), a reader when its READs of the
 *      receives that were waiting when UNPERSIST came have completed (its
 *      READ_DONEs go first). An UNPERSIST of a refused PERSIST is
 *      answered at once. After the ACK a reader numbers its waiting
 *      receives from its message count (less kept messages) and
 *      advertises them as in part 3; an owner of a persistent receive
 *      sets its receive count likewise. A FIN or RDSHUT_ACK ends a
 *      persistent receive without an ACK (nothing more is written).
 * 7. exs_sendfile (no new message, no new version): a SOCK_STREAM send of
 *    its elements' bytes in order, as several ordinary sends (parts 2 and
 *    4) of at most 16 MiB each; the receiver cannot tell them from
 *    exs_send's bytes.
 */
#ifndef EXS_WIRE_H
#define EXS_WIRE_H

#include <stdint.h>

#define EXS_WIRE_VERSION 5
#define EXS_WIRE_MAGIC 0x4558 /* "EX" */
#define EXS_WIRE_SPARE 20
#define EXS_WIRE_EAGER_MAX 4096 /* the most data an EAGER carries, whatever sp_max says */

/* 1. setup (CM private data) */
struct exs_wire_setup {
	uint16_t magic;
	uint8_t version;
	uint8_t kind; /* EXS_WIRE_SETUP_REQUEST / _RESPONSE */
	uint32_t credits;
	uint32_t sp_max;
	uint32_t stream_buf; /* stream receive buffer each side offers (§7.6); 0: none */
	uint32_t wait_ms;    /* request: see part 1 above; response: 0 */
	uint32_t reserved;
};
enum { EXS_WIRE_SETUP_REQUEST = 1, EXS_WIRE_SETUP_RESPONSE = 2, EXS_WIRE_SETUP_REJECT = 3 };

struct exs_wire_reject {
	uint16_t magic;
	uint8_t version;
	uint8_t kind; /* EXS_WIRE_SETUP_REJECT */
	int32_t err;
};

/* 2. data path */
enum exs_wire_type {
	EXS_WIRE_ADVERT = 1,
	EXS_WIRE_DONE = 2,
	EXS_WIRE_FIN = 3,
	EXS_WIRE_ABORT = 4,
	EXS_WIRE_RDSHUT = 5,
	EXS_WIRE_RDSHUT_ACK = 6,
	EXS_WIRE_MORE = 7,
	EXS_WIRE_PING = 8,
	EXS_WIRE_PONG = 9,
	EXS_WIRE_HELLO = 10,
	EXS_WIRE_EAGER = 11, /* struct exs_wire_eager + data */
	EXS_WIRE_RTS = 12,
	EXS_WIRE_CREDIT = 13,
	EXS_WIRE_UNADVERT = 14,
	EXS_WIRE_UNADVERT_ACK = 15,
	EXS_WIRE_PERSIST = 16,
	EXS_WIRE_UNPERSIST = 17,
	EXS_WIRE_UNPERSIST_ACK = 18,
	EXS_WIRE_REFUSE = 19,
	EXS_WIRE_READ_DONE = 20,
	EXS_WIRE_READ_CREDIT = 21,
};
#define EXS_WIRE_ADV_WAITALL 0x1 /* exs_wire_msg.flags of an ADVERT */
#define EXS_WIRE_PST_RECV 0x1	 /* flags of part 6: the persistent receive's, else the send's */
#define EXS_WIRE_PST_NOTIFY 0x2	 /* PERSIST of a send: READ_DONE after each read */

struct exs_wire_msg {
	uint8_t version;
	uint8_t type;
	uint16_t credits; /* eager credits returned (any type) */
	uint16_t flags;
	uint16_t slot;    /* ADVERT, DONE, MORE, UNADVERT(_ACK): the receive operation */
	uint64_t addr;    /* ADVERT, PERSIST */
	uint32_t rkey;    /* ADVERT, PERSIST */
	uint32_t len;     /* ADVERT, PERSIST: buffer size; DONE: bytes placed;
			   * READ_DONE: bytes read; READ_CREDIT: READ_DONEs */
	uint32_t lost;    /* DONE: bytes of the send that did not fit */
	uint32_t seq;     /* ADVERT, RTS: the receive's (message's) number */
};

/* 3. small messages: the header of an EAGER SEND; the data follows */
struct exs_wire_eager {
	uint8_t version;
	uint8_t type; /* EXS_WIRE_EAGER: same place as exs_wire_msg.type */
	uint16_t credits;
	uint32_t seq;
};

_Static_assert(sizeof(struct exs_wire_setup) == 24, "setup is 24 bytes");
_Static_assert(sizeof(struct exs_wire_reject) == 8, "reject is 8 bytes");
_Static_assert(sizeof(struct exs_wire_msg) == 32, "wire message is 32 bytes");
_Static_assert(sizeof(struct exs_wire_eager) == 8, "eager header is 8 bytes");

#endif
