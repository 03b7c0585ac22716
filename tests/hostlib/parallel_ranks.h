// SPDX-License-Identifier: BSD-2-Clause
// Running one function per rank's Communicator on its own thread, as the
// in-process switch tests (ref_switch, roce_soft_switch) need.
#pragma once

#include <incxdp/communicator.h>

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace incxdp::test {

using RankFn = std::function<void(uint32_t, Communicator &)>;

/// Runs f on the first `ranks` communicators in parallel; returns each
/// rank's exception (nullptr if none).
inline std::vector<std::exception_ptr> run_ranks(const std::vector<std::unique_ptr<Communicator>> &comms,
                                                 uint32_t ranks, const RankFn &f)
{
    std::vector<std::exception_ptr> err(ranks);
    std::vector<std::thread> t;
    for (uint32_t r = 0; r < ranks; ++r)
        t.emplace_back([&, r] {
            try {
                f(r, *comms[r]);
            } catch (...) {
                err[r] = std::current_exception();
            }
        });
    for (auto &th : t)
        th.join();
    return err;
}

/// A gtest failure naming the rank for every exception in err.
inline void expect_no_errors(const std::vector<std::exception_ptr> &err)
{
    for (uint32_t r = 0; r < err.size(); ++r) {
        if (!err[r])
            continue;
        try {
            std::rethrow_exception(err[r]);
        } catch (const std::exception &e) {
            ADD_FAILURE() << "rank " << r << ": " << e.what();
        }
    }
}

} // namespace incxdp::test
