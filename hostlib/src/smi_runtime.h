// SPDX-License-Identifier: BSD-2-Clause
// The SMI runtime of one rank (docs/SMI.md §Runtime): its endpoint (the
// mesh link onto the relay of the rank's namespace), the streams
// that buffer received messages per (src, port, op), the credits of the
// streams it sends on, per-peer batching into frames, and the link layer
// that makes frames reliable (sequence numbers per (src, dst), cumulative
// acks, go-back-N). A background thread receives, acknowledges and resends;
// application threads push and pop under the same mutex.
#pragma once

#include "incxdp/smi.h"
#include "incxdp/smi_topology.h"
#include "mesh_link.h"
#include "smi_routes.h"

#include <incxdp/relay.h>
#include <incxdp/smi_maps.h>
#include <incxdp/smi_wire.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace incxdp::smi {

using Clock = std::chrono::steady_clock;

// Receive buffer of a channel when its asynchronicity degree is 0.
inline constexpr int kDefaultAsyncDegree = 16;
// A stream holds at most this many messages: frames beyond are refused (the
// backpressure of eager channels; credits keep rendezvous ones below it).
inline constexpr size_t kStreamCapMsgs = 1024;
// Frames in flight per peer before a sender waits for acks.
inline constexpr size_t kMaxUnackedFrames = 1024;
// A yield that took longer gave the core to another thread: a busy wait
// stops polling then.
inline constexpr auto kYieldContended = std::chrono::microseconds(30);
// A frame's ack rides on the next frame to its sender; one goes alone only
// after this delay, after this many frames, or at once for a gap or a
// duplicate (the sender's go-back-N needs to know). An ack-only frame costs
// a send on each side, which doubled a ping-pong's round trip.
inline constexpr auto kAckDelay = std::chrono::microseconds(500);
inline constexpr uint32_t kAckEveryFrames = 16;
// A partial batch leaves once its oldest message waited this long.
inline constexpr auto kBatchAge = std::chrono::milliseconds(1);
// A streaming sender's full frames leave this many at a time: one send call
// has a fixed cost far above a frame's.
inline constexpr size_t kFramesPerSend = 8;

int elem_size(SMI_Datatype t);     // bytes
int elems_per_msg(SMI_Datatype t); // 28 char, 14 short, 7 int/float, 3 double

// Stream key: (peer rank, port, op).
inline uint32_t stream_key(int peer, int port, int op) {
    return static_cast<uint32_t>(peer) << 16 | static_cast<uint32_t>(port) << 8 |
           static_cast<uint32_t>(op);
}

struct RxStream {
    std::deque<incxdp_smi_msg> msgs; // data messages not yet popped
    size_t front_pos = 0;            // elements of msgs.front() already popped
    uint64_t ungranted = 0;          // popped elements not yet returned as credits
};

struct TxStream {
    bool opened = false;
    int64_t credits = 0; // elements this rank may still send (rendezvous)
};

struct SentFrame {
    uint32_t seq = 0;
    std::vector<uint8_t> bytes; // the relay payload: link ack + messages
    Clock::time_point sent;
};

struct Peer {
    bool reachable = false;            // the cabling has a route to it
    std::vector<incxdp_smi_msg> batch; // complete messages waiting for a frame
    Clock::time_point batch_since;     // when the batch's first message came
    uint32_t next_seq = 1;             // 0 = unsequenced (ack-only frames)
    std::deque<SentFrame> unacked;
    int backoff = 0; // consecutive timeouts of the oldest frame
    uint32_t rx_expected = 1;
    bool ack_due = false;        // frames received since the last ack sent
    bool ack_now = false;        // a gap or a duplicate among them
    uint32_t frames_unacked = 0; // how many
    Clock::time_point ack_due_since;
};

// One direction of a channel towards (or from) one peer.
struct SendLane {
    int dst = 0, port = 0, op = 0;
    incxdp_smi_msg msg{}; // being filled
    int fill = 0;
    int reserved = 0; // credits the message took (rendezvous)
};
struct RecvLane {
    int src = 0, port = 0, op = 0;
};

struct Runtime;

} // namespace incxdp::smi

// The channel state SMI_Channel & co. point to.
struct incxdp_smi_chan {
    SMI_Datatype type = SMI_INT;
    int size = 4, per_msg = 7;
    int64_t budget = 0;      // rendezvous credits B = packets x elems per packet
    int64_t grant_chunk = 1; // B / 8
    bool eager = false;
    uint64_t calls = 0;                    // SMI calls made on this channel
    std::vector<incxdp::smi::SendLane> tx; // per destination
    std::vector<incxdp::smi::RecvLane> rx; // per source
};

struct incxdp_smi_runtime {
    int rank = 0, size = 0;
    bool eager_default = false;
    incxdp::topo::smi::Cabling cabling;
    incxdp::smi::Routes routes;
    std::unique_ptr<incxdp::mesh::Link> link; // null when the cabling gives no peer
    // From the rank's CK_S map: cables to each rank (-1: unreachable); from
    // its CK_R map: the QSFP whose CK holds each port's endpoint, for data
    // and control (-1: none), as `incxdp smi routes --install` wrote them.
    std::vector<int> hops;
    std::array<std::array<int, 2>, INCXDP_SMI_PORTS> port_owner{};
    // A thread waiting in a push or pop receives itself this long
    // (INCXDP_SMI_BUSY_POLL_US) before it sleeps on cv.
    std::chrono::microseconds busy_poll{200};
    size_t max_msgs = INCXDP_SMI_MAX_MSGS_PER_FRAME;
    std::chrono::milliseconds rto{20};

    std::mutex mu;
    std::condition_variable cv; // new messages, credits or acks
    std::vector<incxdp::smi::Peer> peers;
    std::map<uint32_t, incxdp::smi::RxStream> rx;
    std::map<uint32_t, incxdp::smi::TxStream> tx;
    std::deque<incxdp_smi_chan> chans; // stable addresses
    size_t rx_msgs = 0;                // messages in every RxStream
    incxdp_smi_stats stats{};

    // Application threads receiving in wait_for(): the progress thread
    // stays off the link (and the mutex) meanwhile. `wake` (an eventfd)
    // calls it back when one goes to sleep on cv.
    std::atomic<int> app_polling{0};
    int wake = -1;

    std::atomic<bool> stop{false};
    std::thread progress;
};

namespace incxdp::smi {

// Opens the link onto the relay pinned in `pin_dir` (whose routes
// `incxdp smi run` installed) and starts the progress thread.
void start(incxdp_smi_runtime &rt, int rank, const std::string &topology_file,
           const std::string &pin_dir, bool eager);
// Waits for the acks of everything sent (bounded), then stops.
void finish(incxdp_smi_runtime &rt);

// The rank's CK_S and CK_R from the maps pinned in `pin_dir` (hops,
// port_owner). Throws if they are not installed or do not match the cabling.
void read_ck_tables(incxdp_smi_runtime &rt, const std::string &pin_dir);

// Under rt.mu: the message goes into the peer's batch; the batch leaves
// `now`, or when it fills kFramesPerSend frames, or once it is kBatchAge old.
void queue_msg(incxdp_smi_runtime &rt, int dst, const incxdp_smi_msg &m, bool now);
void flush_peer(incxdp_smi_runtime &rt, int dst);
void flush_all(incxdp_smi_runtime &rt);
// Under rt.mu: one receive round (frames in; acks, old batches and overdue
// frames out); the number of frames received.
size_t progress_once(incxdp_smi_runtime &rt);
// Tells the progress thread to receive again (an application thread stopped
// polling and sleeps).
void wake_progress(incxdp_smi_runtime &rt);

// Under rt.mu: waits until pred() holds, flushing batches first so that
// what the wait depends on is on its way. For rt.busy_poll the waiting
// thread receives itself, the progress thread off the link (a frame handed
// over by it costs a wake-up, and both taking the mutex turns each hand-over
// into a futex sleep), then it sleeps until the progress thread notifies.
// It sleeps at once when a yield shows the cores busy: polling would take
// time from the thread that makes progress, maybe the peer rank.
template <class Pred>
void wait_for(incxdp_smi_runtime &rt, std::unique_lock<std::mutex> &lk, Pred pred) {
    if (pred())
        return;
    flush_all(rt);
    if (rt.busy_poll.count() > 0) {
        const auto until = Clock::now() + rt.busy_poll;
        rt.app_polling.fetch_add(1);
        bool contended = false;
        while (!pred() && !contended && Clock::now() < until) {
            if (progress_once(rt) == 0) {
                lk.unlock(); // other threads of the program, other ranks on the core
                const auto t = Clock::now();
                std::this_thread::yield();
                contended = Clock::now() - t > kYieldContended;
                lk.lock();
            }
        }
        rt.app_polling.fetch_sub(1);
        if (pred())
            return;
        wake_progress(rt);
    }
    rt.cv.wait(lk, pred);
}

} // namespace incxdp::smi
