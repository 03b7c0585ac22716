// SPDX-License-Identifier: BSD-2-Clause
// Bad input to the CLI gets a one-line error and changes nothing.
#include "star_fixture.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

namespace incxdp::test {
namespace {

class CliErrors : public StarTopology {
  protected:
    // Exit status 1, one line on stderr that contains `what`.
    void expect_error(const proc::ProcResult &r, const std::string &what)
    {
        EXPECT_EQ(r.status, 1) << r.out << r.err;
        EXPECT_NE(r.err.find(what), std::string::npos) << "expected '" << what << "' in: " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line: " << r.err;
    }

    std::string state()
    {
        auto jobs = cli({"job", "list", "-j"});
        auto st = cli({"status", "-j"});
        EXPECT_EQ(jobs.status, 0) << jobs.err;
        EXPECT_EQ(st.status, 0) << st.err;
        return jobs.out + st.out;
    }

    std::string temp_file(const std::string &content)
    {
        char path[] = "/tmp/incxdp-cli-XXXXXX";
        int fd = mkstemp(path);
        EXPECT_GE(fd, 0);
        ::close(fd);
        std::ofstream(path) << content;
        temps_.push_back(path);
        return path;
    }

    void TearDown() override
    {
        for (auto &p : temps_)
            std::remove(p.c_str());
    }

    std::vector<std::string> temps_;
};

TEST_F(CliErrors, LoadRejectsUnknownAndDoubleLoadedInterfaces)
{
    auto before = state();
    expect_error(cli({"load", "--iface", "nope0"}), "unknown interface 'nope0'");
    expect_error(cli({"load", "--iface", "p-w1"}), "already loaded on p-w1");
    expect_error(cli({"load", "--iface", "p-w2", "--iface", "p-w2"}), "given twice");
    expect_error(cli({"unload", "--iface", "lo"}), "not loaded on lo");
    EXPECT_EQ(state(), before);
}

TEST_F(CliErrors, JobAddRejectsConflictsAndChangesNothing)
{
    auto before = state();
    const std::string w0 = "1=02:49:58:01:00:00/10.77.0.1:4000@p-w0";
    expect_error(cli({"job", "add", "--topo", star_file(), "--job", "1"}), "job 1 already exists");
    // Rank 0 of job 1's address, offered to another job: nothing of job 2 may stay behind.
    expect_error(cli({"job", "add", "--id", "2", "--switch-ip", "10.77.0.254", "-w",
                      "0=02:49:58:09:00:00/10.77.0.9:4000@p-w1", "-w", w0}),
                 "already belongs to job 1");
    expect_error(cli({"job", "add", "--id", "2", "--switch-ip", "10.77.0.254", "-w",
                      "0=02:49:58:09:00:00/10.77.0.9:4000@p-w1", "--slots", "100000"}),
                 "slots");
    expect_error(cli({"job", "add", "--id", "2", "--switch-ip", "10.77.0.254", "-w", "0=zz/10.77.0.9:4000@p-w1"}),
                 "malformed worker");
    expect_error(cli({"job", "add", "--id", "2", "--switch-ip", "10.77.0.254", "-w",
                      "1=02:49:58:09:00:00/10.77.0.9:4000@p-w1"}),
                 "rank 1 out of range");
    expect_error(cli({"job", "add", "--id", "2", "--switch-ip", "10.77.0.254", "-w",
                      "0=02:49:58:09:00:00/10.77.0.9:4000@lo"}),
                 "incxdp is not loaded");
    expect_error(cli({"job", "add", "--id", "999", "--switch-ip", "10.77.0.254", "-w",
                      "0=02:49:58:09:00:00/10.77.0.9:4000@p-w1"}),
                 "out of range");
    expect_error(cli({"job", "del", "9"}), "no job 9");
    EXPECT_EQ(state(), before);
    auto workers = in_node("sw", {"bpftool", "-j", "map", "dump", "pinned", pin_dir_ + "/incxdp_workers"});
    ASSERT_EQ(workers.status, 0);
    EXPECT_EQ(nlohmann::json::parse(workers.out).size(), 4u) << "a failed job add left workers behind";
}

TEST_F(CliErrors, MalformedTopologyFiles)
{
    auto before = state();
    auto bad_yaml = temp_file("name: x\nhosts: [ {name: a\n");
    auto r = cli({"job", "add", "--topo", bad_yaml, "--job", "1"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find(bad_yaml), std::string::npos) << "the error must name the file: " << r.err;
    auto no_job = temp_file("name: x\nsubnet: 10.1.0.0/24\nswitches: [{name: s, ip: 10.1.0.254}]\n"
                            "hosts: [{name: a, ip: 10.1.0.1}]\nlinks: [[a, s]]\n");
    expect_error(cli({"job", "add", "--topo", no_job, "--job", "1"}), "job");
    expect_error(cli({"topo", "up", bad_yaml, "--prefix", prefix_ + "bad-"}, false), bad_yaml);
    EXPECT_EQ(state(), before);
}

// The pins say which namespace the engine lives in; from any other one the
// port ifindexes mean other interfaces, so nothing may change it from there.
TEST_F(CliErrors, AnotherNamespaceCannotChangeTheEngine)
{
    auto before = state();
    auto from_w0 = [&](std::vector<std::string> args) {
        std::vector<std::string> argv = {INCXDP_CLI};
        argv.insert(argv.end(), args.begin(), args.end());
        argv.push_back("--pin-dir");
        argv.push_back(pin_dir_);
        return in_node("w0", argv);
    };
    for (auto args : std::vector<std::vector<std::string>>{
             {"unload"}, {"load", "--iface", "eth0"}, {"job", "reset", "1"}, {"job", "del", "1"}})
        expect_error(from_w0(args), "was loaded in network namespace net:[");
    auto st = from_w0({"status"});
    EXPECT_EQ(st.status, 0) << st.err;
    EXPECT_NE(st.out.find("(not this namespace)"), std::string::npos) << st.out;
    EXPECT_EQ(state(), before);
}

TEST_F(CliErrors, CommandsOnAnUnloadedSwitchSaySo)
{
    const std::string nowhere = pin_dir_ + "-nothing";
    auto r = proc::run({"nsenter", "--net=/var/run/netns/" + ns("sw"), INCXDP_CLI, "stats", "--pin-dir", nowhere});
    expect_error(r, "incxdp is not loaded");
    r = proc::run({"nsenter", "--net=/var/run/netns/" + ns("sw"), INCXDP_CLI, "job", "list", "--pin-dir", nowhere});
    expect_error(r, "incxdp is not loaded");
    r = proc::run({"nsenter", "--net=/var/run/netns/" + ns("sw"), INCXDP_CLI, "status", "--pin-dir", nowhere});
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("not loaded"), std::string::npos) << r.out;
}

} // namespace
} // namespace incxdp::test
