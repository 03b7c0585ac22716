// SPDX-License-Identifier: BSD-2-Clause
// C++ wrappers over SMI's C API (incxdp/smi.h): typed channels, and bulk
// push/pop over spans (the same as element-by-element calls, fewer of them).
#pragma once

#include "incxdp/smi.h"

#include <cstdint>
#include <span>

namespace incxdp::smi {

template <class T> constexpr SMI_Datatype datatype_of();
template <> constexpr SMI_Datatype datatype_of<int32_t>() {
    return SMI_INT;
}
template <> constexpr SMI_Datatype datatype_of<float>() {
    return SMI_FLOAT;
}
template <> constexpr SMI_Datatype datatype_of<double>() {
    return SMI_DOUBLE;
}
template <> constexpr SMI_Datatype datatype_of<char>() {
    return SMI_CHAR;
}
template <> constexpr SMI_Datatype datatype_of<int16_t>() {
    return SMI_SHORT;
}

// SMI_Init on construction, SMI_Finalize on destruction.
class Session {
  public:
    Session(int &argc, char **&argv) : comm_(SMI_Init(&argc, &argv)) {}
    ~Session() { SMI_Finalize(comm_); }
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    SMI_Comm comm() const { return comm_; }
    int rank() const { return SMI_Comm_rank(comm_); }
    int size() const { return SMI_Comm_size(comm_); }

  private:
    SMI_Comm comm_;
};

template <class T> class SendChannel {
  public:
    SendChannel(int count, int destination, int port, SMI_Comm comm, int asynchronicity_degree = 0)
        : ch_(SMI_Open_send_channel_ad(count, datatype_of<T>(), destination, port, comm,
                                       asynchronicity_degree)) {}
    void push(T v) { SMI_Push(&ch_, &v); }
    // The element goes now, with whatever of its message is filled.
    void push_flush(T v) { SMI_Push_flush(&ch_, &v, 1); }
    void push(std::span<const T> v) { incxdp_smi_push_n(&ch_, v.data(), v.size()); }
    SMI_Channel &raw() { return ch_; }

  private:
    SMI_Channel ch_;
};

template <class T> class RecvChannel {
  public:
    RecvChannel(int count, int source, int port, SMI_Comm comm, int asynchronicity_degree = 0)
        : ch_(SMI_Open_receive_channel_ad(count, datatype_of<T>(), source, port, comm,
                                          asynchronicity_degree)) {}
    T pop() {
        T v;
        SMI_Pop(&ch_, &v);
        return v;
    }
    void pop(std::span<T> out) { incxdp_smi_pop_n(&ch_, out.data(), out.size()); }
    SMI_Channel &raw() { return ch_; }

  private:
    SMI_Channel ch_;
};

template <class T> class Bcast {
  public:
    Bcast(int count, int port, int root, SMI_Comm comm)
        : ch_(SMI_Open_bcast_channel(count, datatype_of<T>(), port, root, comm)) {}
    // Root: sends v; others: returns the root's element.
    T operator()(T v = T()) {
        SMI_Bcast(&ch_, &v);
        return v;
    }

  private:
    SMI_BChannel ch_;
};

template <class T> class Reduce {
  public:
    Reduce(int count, SMI_Op op, int port, int root, SMI_Comm comm)
        : ch_(SMI_Open_reduce_channel(count, datatype_of<T>(), op, port, root, comm)) {}
    // The result element on the root; unspecified elsewhere.
    T operator()(T v) {
        T r{};
        SMI_Reduce(&ch_, &v, &r);
        return r;
    }

  private:
    SMI_RChannel ch_;
};

} // namespace incxdp::smi
