// SPDX-License-Identifier: BSD-2-Clause
// The installed package as a user meets it: `cmake --install` into a
// temporary prefix, then a C and a C++ program built outside the tree, once
// with pkg-config and once with find_package(incxdp), and run.
#include "process.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using incxdp::topo::detail::join_argv;
using incxdp::topo::detail::ProcResult;
using incxdp::topo::detail::run;

namespace {

class Installed : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        char tmpl[] = "/tmp/incxdp-pkg-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root_ = tmpl;
        prefix_ = root_ / "prefix";
        // A copy, so that nothing next to the sources (or the build) is seen.
        fs::copy(INCXDP_CONSUMER_DIR, root_ / "src", fs::copy_options::recursive);
        install_ = run({INCXDP_CMAKE, "--install", INCXDP_BUILD_DIR, "--prefix", prefix_});
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        if (!root_.empty())
            fs::remove_all(root_, ec);
    }
    void SetUp() override {
        ASSERT_EQ(install_.status, 0) << "cmake --install failed (is the whole tree built?):\n"
                                      << install_.out << install_.err;
    }

    static std::string lib() { return (prefix_ / INCXDP_LIBDIR).string(); }

    // Runs argv; on failure the test fails with the command and its output.
    static std::string ok(const std::vector<std::string> &argv) {
        const ProcResult r = run(argv);
        EXPECT_EQ(r.status, 0) << join_argv(argv) << "\n" << r.out << r.err;
        return r.out;
    }

    // pkg-config's answer for this prefix only, split into arguments.
    static std::vector<std::string> pkg_config(const std::string &what) {
        setenv("PKG_CONFIG_PATH", (fs::path(lib()) / "pkgconfig").c_str(), 1);
        unsetenv("PKG_CONFIG_LIBDIR");
        const std::string out = ok({"pkg-config", what, "incxdp"});
        std::vector<std::string> args;
        size_t pos = 0;
        while ((pos = out.find_first_not_of(" \n", pos)) != std::string::npos) {
            const size_t end = out.find_first_of(" \n", pos);
            args.push_back(out.substr(pos, end - pos));
            pos = end;
        }
        return args;
    }

    // Runs a program built against the install, with the installed library.
    static std::string run_program(const fs::path &exe) {
        setenv("LD_LIBRARY_PATH", lib().c_str(), 1);
        const std::string out = ok({exe.string()});
        unsetenv("LD_LIBRARY_PATH");
        return out;
    }

    static inline fs::path root_, prefix_;
    static inline ProcResult install_;
};

TEST_F(Installed, Layout) {
    for (const char *f :
         {"bin/incxdp", "bin/incxdp-worker", "bin/incxdp-p2p", "include/incxdp/incxdp.h",
          "include/incxdp/communicator.h", "include/incxdp/proto.h",
          "share/incxdp/topologies/star.yaml", "share/doc/incxdp/README.md"})
        EXPECT_TRUE(fs::exists(prefix_ / f)) << f;
    const fs::path l = lib();
    for (const char *f :
         {"libincxdp.so", "libincxdp.so.0", "libnccl-net-incxdp.so", "pkgconfig/incxdp.pc",
          "cmake/incxdp/incxdpConfig.cmake", "cmake/incxdp/incxdpConfigVersion.cmake",
          "incxdp/bpf/incxdp_switch.bpf.o", "incxdp/bpf/incxdp_pass.bpf.o"})
        EXPECT_TRUE(fs::exists(l / f)) << f;
    // The shared library carries its SONAME, so programs survive a new 0.x.y.
    EXPECT_NE(ok({"readelf", "-d", (l / "libincxdp.so").string()}).find("[libincxdp.so.0]"),
              std::string::npos);
    // The CLI runs from the install.
    EXPECT_NE(ok({(prefix_ / "bin/incxdp").string(), "--help"}).find("topo"), std::string::npos);
}

// Every public header of hostlib compiles alone against the install: none
// includes a header that is not installed.
TEST_F(Installed, EveryPublicHeaderCompilesAlone) {
    const auto cflags = pkg_config("--cflags");
    for (const auto &e : fs::directory_iterator(INCXDP_SOURCE_DIR "/hostlib/include/incxdp")) {
        const std::string name = e.path().filename();
        const bool c = e.path().extension() == ".h" &&
                       (name == "incxdp.h" || name == "smi.h"); // the C headers
        for (const bool cxx : {true, false}) {
            if (!cxx && !c)
                continue;
            const fs::path src = root_ / (name + (cxx ? ".cpp" : ".c"));
            ok({"sh", "-c", "echo '#include <incxdp/" + name + ">' > " + src.string()});
            std::vector<std::string> argv = {cxx ? "c++" : "cc", "-fsyntax-only", "-Werror"};
            if (cxx)
                argv.push_back("-std=c++20");
            argv.insert(argv.end(), cflags.begin(), cflags.end());
            argv.push_back(src.string());
            ok(argv);
        }
    }
}

TEST_F(Installed, PkgConfig) {
    const auto cflags = pkg_config("--cflags"), libs = pkg_config("--libs");
    ASSERT_FALSE(libs.empty());
    const fs::path src = root_ / "src", out = root_ / "pc";
    fs::create_directories(out);

    std::vector<std::string> c = {"cc", "-Wall", "-Werror"};
    c.insert(c.end(), cflags.begin(), cflags.end());
    c.insert(c.end(), {(src / "use_c_api.c").string(), "-o", (out / "use_c_api").string()});
    c.insert(c.end(), libs.begin(), libs.end());
    ok(c);
    EXPECT_NE(run_program(out / "use_c_api").find("incxdp-consumer.yaml"), std::string::npos);

    std::vector<std::string> cxx = {"c++", "-std=c++20", "-Wall", "-Werror"};
    cxx.insert(cxx.end(), cflags.begin(), cflags.end());
    cxx.insert(cxx.end(),
               {(src / "use_cpp_api.cpp").string(), "-o", (out / "use_cpp_api").string()});
    cxx.insert(cxx.end(), libs.begin(), libs.end());
    ok(cxx);
    EXPECT_NE(run_program(out / "use_cpp_api").find("rank 7 is not below world_size 4"),
              std::string::npos);
}

TEST_F(Installed, FindPackage) {
    const fs::path build = root_ / "cmake-build";
    ok({INCXDP_CMAKE, "-S", (root_ / "src").string(), "-B", build.string(),
        "-DCMAKE_PREFIX_PATH=" + prefix_.string(), "-DCMAKE_BUILD_TYPE=Release"});
    ok({INCXDP_CMAKE, "--build", build.string(), "-j2"});
    // CMake gives build-tree executables an RPATH to the imported library.
    EXPECT_NE(ok({(build / "use_c_api").string()}).find("incxdp-consumer.yaml"), std::string::npos);
    EXPECT_NE(ok({(build / "use_cpp_api").string()}).find("rank 7 is not below world_size 4"),
              std::string::npos);
}

} // namespace
