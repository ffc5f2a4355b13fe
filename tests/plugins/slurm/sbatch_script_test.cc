// `submit`: argument parsing and the rendered sbatch script (checked with `bash -n` and by running its
// requeue logic against fake srun/scontrol on PATH; the real cluster runs it in slurm_cluster_test).
#include "taehv/slurm/sbatch_script.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "infra/free_port.h"
#include "taehv/command_line.h"

namespace taehv::slurm {
namespace {

/// `args` parsed as taehv-run parses them (by submitCommand()), then read by parseSubmitArgs: "" or the first error.
std::string parseInto(const std::vector<std::string>& args, SubmitOptions& o) {
  const Checked<ParsedCommand> parsed = parseCommandArgs(submitCommand(), args);
  return parsed.ok() ? parseSubmitArgs(parsed.value.args, o).error : parsed.error;
}

SubmitOptions parse(const std::vector<std::string>& args) {
  SubmitOptions o;
  std::string err = parseInto(args, o);
  EXPECT_TRUE(err.empty()) << err;
  return o;
}

std::string parseError(const std::vector<std::string>& args) {
  SubmitOptions o;
  return parseInto(args, o);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(SlurmSubmitArgs, ParsesEveryOption) {
  SubmitOptions o = parse({"--nodes",
                           "2",
                           "--gpus-per-node=8",
                           "--time",
                           "02:00:00",
                           "--partition",
                           "gpu",
                           "--job-name",
                           "vae",
                           "--max-restarts",
                           "3",
                           "--layout",
                           "task",
                           "--checkpoint-dir",
                           "/ck",
                           "--sbatch-arg=--account=abc",
                           "--resume-arg",
                           "--resume={ckpt}",
                           "--dry-run",
                           "--",
                           "taehv-train",
                           "--set",
                           "train.steps=10"});
  EXPECT_EQ(o.nodes, 2);
  EXPECT_EQ(o.gpus_per_node, 8);
  EXPECT_EQ(o.time, "02:00:00");
  EXPECT_EQ(o.partition, "gpu");
  EXPECT_EQ(o.job_name, "vae");
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_TRUE(o.task_per_gpu);
  EXPECT_TRUE(o.dry_run);
  EXPECT_EQ(o.sbatch_args, (std::vector<std::string>{"--account=abc"}));
  EXPECT_EQ(o.command, (std::vector<std::string>{"taehv-train", "--set", "train.steps=10", "--resume={ckpt}"}));
  EXPECT_EQ(o.resume_arg_count, 1u);
}

TEST(SlurmSubmitArgs, SbatchsOneLetterNamesWork) {
  SubmitOptions o = parse({"-N", "3", "-t", "30", "-p", "gpu", "-J", "vae", "-o", "vae.log"});
  EXPECT_EQ(o.nodes, 3);
  EXPECT_EQ(o.time, "30");
  EXPECT_EQ(o.partition, "gpu");
  EXPECT_EQ(o.job_name, "vae");
  EXPECT_EQ(o.output, "vae.log");
}

TEST(SlurmSubmitArgs, BadInputSaysWhatIsWrong) {
  EXPECT_EQ(parseError({}), "--nodes N is required");
  EXPECT_TRUE(contains(parseError({"--nodes", "0"}), "--nodes '0': expected a whole number from 1"));
  EXPECT_TRUE(contains(parseError({"--nodes", "two"}), "--nodes 'two'"));
  EXPECT_EQ(parseError({"--nodes"}), "the required argument for option '--nodes' is missing");
  EXPECT_EQ(parseError({"--nodes", "2", "-N", "3"}), "option '--nodes' cannot be specified more than once");
  EXPECT_EQ(parseError({"--nodes", "2", "--dry-run", "--dry-run"}),
            "option '--dry-run' cannot be specified more than once");
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--frobnicate"}), "unknown option '--frobnicate'"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--layout", "gpus"}), "--layout 'gpus'"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--job-name", "a\nb"}), "single line"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--job-name", "my job"}), "no spaces allowed"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--resume-arg", "x", "--", "cmd"}), "needs --checkpoint-dir"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--checkpoint-pattern", "a;rm"}), "--checkpoint-pattern 'a;rm'"));
}

// Issue 17, kind 10: `submit --time forever` rendered a script that sbatch rejects only at submission.
TEST(HostileSlurmSubmitArgs, TimeLimitsAreTheFormsSbatchTakes) {
  for (const char* bad : {"forever", "1h", "-5", "1:2:3:4", "4:00:99", "1-", "2-x", "1.5", "$(reboot)"}) {
    EXPECT_TRUE(contains(parseError({"--nodes", "2", "--time", bad}), "--time '" + std::string(bad) +
                                                                           "': not a SLURM time limit"))
        << bad << ": " << parseError({"--nodes", "2", "--time", bad});
  }
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "-t", "forever"}), "--time 'forever'"));
  for (const char* good : {"30", "30:00", "4:00:00", "2-00", "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"}) {
    EXPECT_EQ(parseError({"--nodes", "2", "--time", good}), "") << good;
  }
}

TEST(SlurmSubmitScript, OneTaskPerNodeScript) {
  SubmitOptions o = parse({"--nodes", "4", "--gpus-per-node", "8", "--time", "1:00:00", "--partition", "p1",
                           "--job-name", "j1", "--max-restarts", "2", "--", "taehv-train", "--set", "a b"});
  std::string s = renderSbatchScript(o, "/opt/taehv/bin/taehv-run", "0.1.0");
  for (const char* line : {"#SBATCH --job-name=j1\n", "#SBATCH --nodes=4\n", "#SBATCH --ntasks-per-node=1\n",
                           "#SBATCH --gpus-per-node=8\n", "#SBATCH --time=1:00:00\n", "#SBATCH --partition=p1\n",
                           "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n", "MAX_RESTARTS=2\n",
                           "srun --kill-on-bad-exit=1 --wait=60 --unbuffered --nodes=4 --ntasks-per-node=1",
                           "\"$TAEHV_RUN\" --backend slurm --nproc-per-node 8 -- taehv-train --set 'a b'",
                           "scontrol requeue \"$SLURM_JOB_ID\"", "TAEHV_RUN=/opt/taehv/bin/taehv-run\n"}) {
    EXPECT_TRUE(contains(s, line)) << "missing: " << line << "\n" << s;
  }
}

TEST(SlurmSubmitScript, MakesAJobTokenAtRunTimeForEveryTask) {
  SubmitOptions o = parse({"--nodes", "2", "--time", "1:00:00", "--job-name", "j"});
  const std::string s = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  // The token line, run by bash as the batch script runs it: 64 hex characters, a new one each time, exported
  // before srun (which hands the environment to every task); one the submitter exported is kept.
  const auto at = s.find("if [ -z \"${TAEHV_JOB_TOKEN:-}\" ]");
  ASSERT_NE(at, std::string::npos) << s;
  ASSERT_LT(at, s.find("\nsrun ")) << s;
  const std::string lines = s.substr(at, s.find("export TAEHV_JOB_TOKEN\n", at) + 23 - at);
  auto run = [&](const std::string& pre) {
    const std::string cmd = "bash -c " + std::string("'") + pre + "\n" + lines + "\nprintf %s \"$TAEHV_JOB_TOKEN\"'";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[256];
    while (p && std::fgets(buf, sizeof buf, p)) out += buf;
    if (p) ::pclose(p);
    return out;
  };
  ASSERT_EQ(lines.find('\''), std::string::npos) << "the test quotes the lines with '...'";
  const std::string a = run("unset TAEHV_JOB_TOKEN");
  EXPECT_EQ(a.size(), 64u) << a;
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(run("unset TAEHV_JOB_TOKEN"), a);
  EXPECT_EQ(run("export TAEHV_JOB_TOKEN=mine-mine-mine-mine"), "mine-mine-mine-mine");
}

TEST(SlurmSubmitScript, OneTaskPerGpuScriptWithoutGpus) {
  SubmitOptions o = parse({"--nodes", "2", "--nproc-per-node", "2", "--layout", "task"});
  std::string s = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  EXPECT_TRUE(contains(s, "#SBATCH --ntasks-per-node=2\n"));
  EXPECT_FALSE(contains(s, "--gpus-per-node"));
  EXPECT_FALSE(contains(s, "--partition"));
  EXPECT_TRUE(contains(s, "#SBATCH --no-requeue\n"));
  EXPECT_TRUE(contains(s, "--ntasks-per-node=2 \\\n  \"$TAEHV_RUN\" --backend slurm --slurm-layout task \"${"));
}

/// Writes `text` to `path` as an executable script.
void writeExecutable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  chmod(path.c_str(), 0755);
}

/// A folder with fake srun/scontrol that record their arguments, and a checkpoint folder with two entries.
class FakeCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-sbatch-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    writeExecutable(dir_ + "/scontrol", "#!/bin/sh\necho \"scontrol $*\" >> " + dir_ + "/log\n");
    mkdir((dir_ + "/ck").c_str(), 0755);
    std::ofstream(dir_ + "/ck/checkpoint-20") << "new";
    std::ofstream(dir_ + "/ck/metrics.jsonl") << "not a checkpoint, and the newest entry";
    std::ofstream(dir_ + "/ck/checkpoint-10") << "old";
    ASSERT_EQ(system(("touch -d '2020-01-01' " + dir_ + "/ck/checkpoint-10").c_str()), 0);
  }
  void TearDown() override { ASSERT_EQ(system(("rm -rf " + dir_).c_str()), 0); }

  /// Runs `script` with srun exiting `srun_rc`; returns the fakes' log, sets *rc to the script's exit code.
  std::string run(const std::string& script, const std::string& env, int srun_rc, int* rc) {
    unlink((dir_ + "/log").c_str());
    writeExecutable(dir_ + "/srun", "#!/bin/sh\necho \"srun $* RESUME=$TAEHV_RESUME_FROM\" >> " + dir_ + "/log\n" +
                                        "[ -n \"$SLURM_HOSTFILE\" ] && echo \"hostfile: $(tr '\\n' ' ' < \"$SLURM_HOSTFILE\")\"\n" +
                                        "exit " + std::to_string(srun_rc) + "\n");
    std::ofstream(dir_ + "/job.sh") << script;
    std::string cmd = "cd " + dir_ + " && PATH=" + dir_ + ":$PATH SLURM_JOB_ID=9 SLURM_JOB_NODELIST='n[1-2]' " + env +
                      " bash job.sh > out 2>&1";
    int status = system(cmd.c_str());
    *rc = WEXITSTATUS(status);
    std::ifstream in(dir_ + "/log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

TEST_F(FakeCluster, RequeuesAfterAFailureAndResumesFromTheNewestCheckpoint) {
  SubmitOptions o = parse({"--nodes", "2", "--max-restarts", "1", "--checkpoint-dir", dir_ + "/ck", "--resume-arg",
                           "train.resume={ckpt}", "--", "worker"});
  std::string script = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  ASSERT_EQ(system(("bash -n <<'EOF'\n" + script + "\nEOF").c_str()), 0) << script;

  int rc = -1;
  // The first run fails: the job requeues itself.
  std::string log = run(script, "", 3, &rc);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_TRUE(contains(log, "scontrol requeue 9")) << log;
  EXPECT_TRUE(contains(log, "-- worker RESUME=\n")) << "no resume on the first run: " << log;
  // The requeued run (SLURM_RESTART_COUNT=1) resumes from the newest checkpoint and, failing again, gives up.
  log = run(script, "SLURM_RESTART_COUNT=1", 3, &rc);
  EXPECT_EQ(rc, 3) << log;
  EXPECT_FALSE(contains(log, "scontrol requeue")) << log;
  EXPECT_TRUE(
      contains(log, "-- worker train.resume=" + dir_ + "/ck/checkpoint-20 RESUME=" + dir_ + "/ck/checkpoint-20\n"))
      << log;
  // A successful run exits 0 without requeueing.
  log = run(script, "", 0, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(contains(log, "scontrol requeue")) << log;
}

TEST(SlurmSubmitScript, UnevenNodesWhenAskedForInBothLayouts) {
  // One task per node: each node's taehv-run takes its own count from --slurm-nprocs.
  SubmitOptions o = parse({"--nodes", "4", "--node-nprocs", "2(x3),1"});
  std::string s = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  EXPECT_TRUE(contains(s, "#SBATCH --ntasks-per-node=1\n")) << s;
  EXPECT_TRUE(contains(s, "--nodes=4 --ntasks-per-node=1 \\\n  \"$TAEHV_RUN\" --backend slurm --slurm-nprocs '2(x3),1'"))
      << s;
  // One task per worker: room for the fullest node, tasks placed by a hostfile.
  o = parse({"--nodes", "2", "--node-nprocs", "3,1", "--layout", "task"});
  s = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  EXPECT_TRUE(contains(s, "#SBATCH --ntasks-per-node=3\n")) << s;
  EXPECT_TRUE(contains(s, "--nodes=2 --ntasks=4 --distribution=arbitrary \\\n  \"$TAEHV_RUN\" --backend slurm "
                          "--slurm-layout task"))
      << s;
  EXPECT_TRUE(contains(parseError({"--nodes", "3", "--node-nprocs", "3,1"}),
                       "--node-nprocs 3,1 lists 2 nodes but --nodes is 3"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--node-nprocs", "2(x0)"}), "has a bad repeat count"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--node-nprocs", "3,0"}), "node 1 has 0 workers"));
  EXPECT_TRUE(contains(parseError({"--nodes", "2", "--node-nprocs", "3,1", "--nproc-per-node", "2"}), "give one"));
}

TEST_F(FakeCluster, UnevenTaskLayoutPlacesEachNodesTasksByAHostfile) {
  SubmitOptions o = parse({"--nodes", "2", "--node-nprocs", "3,1", "--layout", "task", "--", "worker"});
  const std::string script = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  ASSERT_EQ(system(("bash -n <<'EOF'\n" + script + "\nEOF").c_str()), 0) << script;
  writeExecutable(dir_ + "/scontrol", "#!/bin/sh\n[ \"$1 $2 $3\" = 'show hostnames n[1-2]' ] && printf 'n1\\nn2\\n'\n");
  int rc = -1;
  const std::string log = run(script, "", 0, &rc);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_TRUE(contains(log, "srun --kill-on-bad-exit=1 --wait=60 --unbuffered --nodes=2 --ntasks=4 "
                            "--distribution=arbitrary")) << log;
  std::ifstream out(dir_ + "/out");
  std::stringstream text;
  text << out.rdbuf();
  EXPECT_TRUE(contains(text.str(), "hostfile: n1 n1 n1 n2 \n")) << text.str();
}

TEST(SlurmSubmitExample, ExampleScriptIsWhatSubmitRenders) {
  // examples/slurm/train-2x8.sbatch must not drift from the renderer (only TAEHV_RUN is made overridable).
  const char* src = getenv("TAEHV_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "TAEHV_SOURCE_DIR is set by ctest";
  std::ifstream in(std::string(src) + "/examples/slurm/train-2x8.sbatch");
  std::stringstream example;
  example << in.rdbuf();
  SubmitOptions o = parse({"--nodes",
                           "2",
                           "--gpus-per-node",
                           "8",
                           "--time",
                           "04:00:00",
                           "--partition",
                           "gpu",
                           "--job-name",
                           "taehv-train",
                           "--max-restarts",
                           "3",
                           "--checkpoint-dir",
                           "runs/taehv-2x8",
                           "--resume-arg=--resume",
                           "--resume-arg={ckpt}",
                           "--",
                           "taehv-train",
                           "--config",
                           "examples/configs/h100-2x8.yaml",
                           "--set",
                           "output.dir=runs/taehv-2x8"});
  std::string rendered = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  std::string::size_type at = rendered.find("TAEHV_RUN=/x/taehv-run\n");
  ASSERT_NE(at, std::string::npos);
  rendered.replace(at, std::string("TAEHV_RUN=/x/taehv-run").size(), "TAEHV_RUN=${TAEHV_RUN:-taehv-run}");
  EXPECT_EQ(example.str(), rendered);
}

// --min-nodes: what it needs and what it refuses, each in one line.
TEST(SlurmSubmitArgs, MinNodesNeedsEtcdAndLeavesTheElasticOptionsToSubmit) {
  const std::vector<std::string> base = {"--nodes", "3", "--rdzv-backend", "etcd"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  SubmitOptions o = parse(with({"--min-nodes", "2"}));
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.reformations, -1);
  EXPECT_EQ(parse(with({"--min-nodes", "1", "--reformations", "5"})).reformations, 5);
  EXPECT_EQ(parseError({"--nodes", "3", "--min-nodes", "2"}),
            "--min-nodes needs --rdzv-backend etcd: without it node 0 leads the node group and its loss ends the job; "
            "with etcd any node may be lost");
  EXPECT_EQ(parseError(with({"--min-nodes", "4"})),
            "--min-nodes 4 is more than --nodes 3; give at most the job's node count");
  EXPECT_TRUE(contains(parseError(with({"--min-nodes", "0"})), "--min-nodes '0': expected a whole number from 1"));
  EXPECT_EQ(parseError(with({"--reformations", "2"})),
            "--reformations needs --min-nodes (a run re-forms only without a lost node)");
  EXPECT_EQ(parseError(with({"--min-nodes", "2", "--layout", "task"})),
            "--min-nodes needs --layout node: one taehv-run per node re-forms the group without a lost node");
  EXPECT_TRUE(contains(parseError(with({"--min-nodes", "2", "--srun-wait", "5"})), "--srun-wait does not apply"));
  for (const char* arg : {"--nnodes=2:3", "--nnodes", "--max-restarts=4", "--max-restarts"}) {
    EXPECT_EQ(parseError(with({"--min-nodes", "2", "--launch-arg", arg})),
              std::string("--launch-arg ") + arg + ": with --min-nodes, submit sets " +
                  std::string(arg).substr(0, std::string(arg).find('=')) +
                  " itself (--nnodes M:N, --max-restarts = --reformations)")
        << arg;
  }
  // Without --min-nodes the launch options stay the user's, as before.
  EXPECT_EQ(parseError(with({"--launch-arg=--nnodes=2:3"})), "");
}

TEST(SlurmSubmitScript, ElasticJobOutlivesANodeAndItsStepATask) {
  SubmitOptions o = parse({"--nodes", "3", "--rdzv-backend", "etcd", "--min-nodes", "2", "--max-restarts", "1",
                           "--launch-arg=--node-timeout=5", "--", "worker", "a b"});
  const std::string s = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  ASSERT_EQ(system(("bash -n <<'EOF'\n" + s + "\nEOF").c_str()), 0) << s;
  for (const char* part :
       {"#SBATCH --no-kill\n", "#SBATCH --requeue\n",
        "srun --no-kill --kill-on-bad-exit=0 --wait=0 --unbuffered --nodes=3 --ntasks-per-node=1 \\\n"
        "  bash -c \"$task_report\" taehv-task \"$task_mark\" \"$TAEHV_RUN\" --backend slurm --nproc-per-node 1 "
        "--rdzv-backend etcd --rdzv-endpoint \"$etcd_endpoints\" --nnodes 2:3 --max-restarts 1 --node-timeout=5 -- "
        "worker 'a b' \"${resume_args[@]}\" |\n  task_exits_filter\nrc=${PIPESTATUS[0]}\n"}) {
    EXPECT_TRUE(contains(s, part)) << "missing: " << part << "\n" << s;
  }
  EXPECT_FALSE(contains(s, "--kill-on-bad-exit=1")) << s;
  EXPECT_TRUE(contains(renderSbatchScript(parse({"--nodes", "3", "--rdzv-backend", "etcd", "--min-nodes", "1",
                                                 "--reformations", "7"}),
                                          "/x/taehv-run", "0.1.0"),
                       " --nnodes 1:3 --max-restarts 7"));
  // --min-nodes N is a fixed-size job: every node is needed, a task that fails ends them all.
  const std::string fixed =
      renderSbatchScript(parse({"--nodes", "3", "--rdzv-backend", "etcd", "--min-nodes", "3"}), "/x/taehv-run", "0");
  EXPECT_TRUE(contains(fixed, "srun --kill-on-bad-exit=1 --wait=60 ")) << fixed;
  EXPECT_FALSE(contains(fixed, "--no-kill")) << fixed;
  EXPECT_FALSE(contains(fixed, "--nnodes")) << fixed;
}

/// The elastic step's part of the script (from the task exits' lines to its end) run with a fake srun that runs the
/// task command on nodes n1..n3 (a node named in FAILED_NODES runs nothing and srun exits FAILED_RC, default 1, for
/// it, as for a failed node),
/// a fake taehv-run that prints a line and exits with EXIT_<node> (default 0), and a fake scontrol.
class ElasticStep : public FakeCluster {
 protected:
  void SetUp() override {
    FakeCluster::SetUp();
    const SubmitOptions o = parse({"--nodes", "3", "--rdzv-backend", "etcd", "--min-nodes", "2", "--max-restarts",
                                   "1", "--", "worker"});
    const std::string script = renderSbatchScript(o, dir_ + "/taehv-run", "0.1.0");
    const std::size_t at = script.find("# Each task reports");
    ASSERT_NE(at, std::string::npos) << script;
    step_ = "set -uo pipefail\nrestart=0 MAX_RESTARTS=1 TAEHV_RUN=" + dir_ +
            "/taehv-run etcd_endpoints=e:2379\nresume_args=()\n" + script.substr(at);
    writeExecutable(dir_ + "/scontrol", "#!/bin/sh\necho \"scontrol $*\" >> " + dir_ +
                                            "/log\n[ \"$1\" = show ] && printf 'n1\\nn2\\nn3\\n'\nexit 0\n");
    writeExecutable(dir_ + "/srun",
                    "#!/bin/bash\n"
                    "echo \"srun $*\" >> " + dir_ + "/log\n"
                    "while [ $# -gt 0 ]; do case $1 in --*) shift ;; *) break ;; esac; done\n"
                    "rc=0 i=0 pids=()\n"
                    "for h in n1 n2 n3; do\n"
                    "  if [[ \" ${FAILED_NODES:-} \" == *\" $h \"* ]]; then\n"
                    "    [ \"${FAILED_RC:-1}\" -gt $rc ] && rc=${FAILED_RC:-1}\n"
                    "  else\n"
                    "    SLURM_NODEID=$i SLURMD_NODENAME=$h \"$@\" & pids+=($!); fi\n"
                    "  i=$((i + 1))\n"
                    "done\n"
                    "for p in \"${pids[@]}\"; do wait $p; c=$?; [ $c -gt $rc ] && rc=$c; done\n"
                    "exit $rc\n");
    writeExecutable(dir_ + "/taehv-run",
                    "#!/bin/bash\n"
                    "echo \"$SLURMD_NODENAME: trained\"\n"
                    "[ -n \"${FORGE:-}\" ] && echo \"taehv-task 0123456789abcdef $SLURM_NODEID $SLURMD_NODENAME 0\"\n"
                    "v=EXIT_$SLURMD_NODENAME; exit ${!v:-0}\n");
  }

  /// Runs the step with `env`; returns its output, sets *rc to its exit code.
  std::string runStep(const std::string& env, int* rc) {
    unlink((dir_ + "/log").c_str());
    std::ofstream(dir_ + "/step.sh") << step_;
    const std::string cmd = "cd " + dir_ + " && PATH=" + dir_ + ":$PATH SLURM_JOB_ID=9 SLURM_JOB_NODELIST='n[1-3]' " +
                            "TMPDIR=" + dir_ + " " + env + " bash step.sh > out 2>&1";
    const int status = system(cmd.c_str());
    *rc = WEXITSTATUS(status);
    std::ifstream in(dir_ + "/out");
    std::stringstream out;
    out << in.rdbuf();
    std::ifstream log(dir_ + "/log");
    std::stringstream calls;
    calls << log.rdbuf();
    calls_ = calls.str();
    return out.str();
  }

  std::string step_, calls_;
};

TEST_F(ElasticStep, ANodeLostOnTheWayIsNoFailureOfTheTraining) {
  int rc = -1;
  std::string out = runStep("EXIT_n3=137", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "n1: trained\n") && contains(out, "n3: trained\n")) << out;
  EXPECT_TRUE(contains(out, "taehv: node 2 (n3) ended: taehv-run exited with code 137\n")) << out;
  EXPECT_TRUE(contains(out, "taehv: node 0 (n1) ended: taehv-run exited with code 0\n")) << out;
  EXPECT_FALSE(contains(out, "taehv-task ")) << "the marked lines are the filter's: " << out;
  EXPECT_TRUE(contains(out, "taehv: the run has completed: the training finished on 2 node(s); lost on the way: n3 "
                            "(exit code 137); srun's exit code 137\n"))
      << out;
  EXPECT_FALSE(contains(calls_, "requeue")) << calls_;
  // A node that failed as a node reports nothing.
  out = runStep("FAILED_NODES=n2", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "taehv: the run has completed: the training finished on 2 node(s); lost on the way: n2 "
                            "(no exit reported: the node failed); srun's exit code 1\n"))
      << out;
  // Every node finished: nothing to say.
  out = runStep("", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_FALSE(contains(out, "the run has completed")) << out;
  EXPECT_TRUE(contains(out, "taehv: node 2 (n3) ended: taehv-run exited with code 0\n")) << out;
  EXPECT_NE(std::system(("ls " + dir_ + "/tmp.* >/dev/null 2>&1").c_str()), 0) << "the task exits' file stayed";
}

TEST_F(ElasticStep, NoNodeFinishedIsAFailureAndRequeues) {
  int rc = -1;
  std::string out = runStep("EXIT_n1=3 EXIT_n2=3 EXIT_n3=137", &rc);
  EXPECT_EQ(rc, 0) << "requeued: " << out;
  EXPECT_TRUE(contains(out, "taehv: run failed (exit code 137); requeueing job 9, restart 1 of 1")) << out;
  EXPECT_TRUE(contains(calls_, "scontrol requeue 9")) << calls_;
  EXPECT_FALSE(contains(out, "the run has completed")) << out;
  // A worker's line that looks like a task's exit, without this run's mark, is output like any other and counts
  // for nothing.
  out = runStep("FORGE=1 EXIT_n1=3 EXIT_n2=3 EXIT_n3=3", &rc);
  EXPECT_TRUE(contains(out, "taehv-task 0123456789abcdef 0 n1 0\n")) << out;
  EXPECT_TRUE(contains(out, "taehv: run failed (exit code 3); requeueing job 9")) << out;
  EXPECT_FALSE(contains(out, "the run has completed")) << out;
  // srun exiting 0 with no node's end reported (every node failed, or the reports were lost) is no success either.
  out = runStep("FAILED_NODES='n1 n2 n3' FAILED_RC=0", &rc);
  EXPECT_TRUE(contains(out, "taehv: srun exited 0 but no node reported that its taehv-run finished (n1 (no exit "
                            "reported: the node failed), n2 (no exit reported: the node failed), n3 (no exit "
                            "reported: the node failed)); the run counts as failed\n"))
      << out;
  EXPECT_TRUE(contains(out, "taehv: run failed (exit code 1); requeueing job 9")) << out;
}

// --rdzv-backend etcd: one background srun step per etcd member on the job's first 3 nodes, their endpoints handed
// to taehv-run; run with fake srun/scontrol whose hosts do not exist, the wait for health ends with one line, exit 2,
// and no training step.
TEST_F(FakeCluster, EtcdMembersOnTheFirstThreeNodesAndTheirEndpointsPassedOn) {
  const SubmitOptions o = parse({"--nodes", "4", "--rdzv-backend", "etcd", "--", "worker"});
  const std::string script = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  ASSERT_EQ(system(("bash -n <<'EOF'\n" + script + "\nEOF").c_str()), 0) << script;
  EXPECT_TRUE(contains(script, "head -n 3))\n")) << script;
  EXPECT_TRUE(contains(script, "\"$TAEHV_RUN\" --backend slurm --nproc-per-node 1 --rdzv-backend etcd "
                               "--rdzv-endpoint \"$etcd_endpoints\" -- worker"))
      << script;
  writeExecutable(dir_ + "/scontrol", "#!/bin/sh\necho \"scontrol $*\" >> " + dir_ +
                                          "/log\n[ \"$1\" = show ] && printf 'n1.invalid\\nn2.invalid\\nn3.invalid\\n"
                                          "n4.invalid\\n'\nexit 0\n");
  int rc = -1;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string log = run(script, "TAEHV_ETCD_WAIT_S=1 TMPDIR=", 0, &rc);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(rc, 2) << log;
  for (int i = 0; i < 3; ++i) {
    const std::string h = "n" + std::to_string(i + 1) + ".invalid";
    EXPECT_TRUE(contains(log, "srun --overlap --nodes=1 --ntasks=1 -w " + h + " bash -c ")) << log;
    EXPECT_TRUE(contains(log, " taehv-etcd /tmp/taehv-etcd-9-0-" + std::to_string(i) + " etcd --name taehv-etcd-" +
                                  std::to_string(i) + " --data-dir /tmp/taehv-etcd-9-0-" + std::to_string(i)))
        << log;
    EXPECT_TRUE(contains(log, "--advertise-client-urls http://" + h + ":2379")) << log;
  }
  EXPECT_TRUE(contains(log, "--initial-cluster taehv-etcd-0=http://n1.invalid:2380,taehv-etcd-1=http://n2.invalid:"
                            "2380,taehv-etcd-2=http://n3.invalid:2380 "))
      << log;
  EXPECT_FALSE(contains(log, "n4.invalid")) << "3 members only: " << log;
  EXPECT_FALSE(contains(log, "--kill-on-bad-exit")) << "no training step without etcd: " << log;
  std::ifstream in(dir_ + "/out");
  std::stringstream out;
  out << in.rdbuf();
  EXPECT_TRUE(contains(out.str(), "taehv: etcd on n1.invalid did not answer healthy on port 2379 within 1 s"))
      << out.str();

  EXPECT_EQ(parseError({"--nodes", "3", "--rdzv-backend", "c10d"}),
            "--rdzv-backend 'c10d': submit knows etcd (members started on the job's first 3 nodes); leave it out for "
            "the node group led by node 0");
}

// The etcd part of the script run for real on this machine: scontrol names 127.0.0.1, the fake srun runs a member's
// command here (as srun would on its node) and records the training step. The real SLURM cluster showed what the
// fakes above could not: the health probe's `exec 3<>/dev/tcp/... 2>/dev/null` sent the script's stderr to /dev/null
// for good once a member answered (every taehv-run and srun line of the training step was lost), a TERM to the
// members' srun SIGKILLs their steps (their data directories stayed behind), and a graceful etcd stop waited 5 s
// for a leader hand-over to members already gone, and scancel's TERM followed by the script's USR1 killed the rm
// of a member's data directory. Here: the member is healthy, the training step's stderr reaches the job's output,
// and after a TERM to the member's step (scancel) and the script's end the member is gone and its data removed.
TEST_F(FakeCluster, EtcdMemberServesTheStepThenStopsAndRemovesItsData) {
  if (system("command -v etcd >/dev/null") != 0) GTEST_SKIP() << "etcd is not installed (scripts/setup.sh installs it)";
  const int client_port = taehv::testing::freeLowPort(), peer_port = taehv::testing::freeLowPort();
  ASSERT_TRUE(client_port > 0 && peer_port > 0 && client_port != peer_port);
  const SubmitOptions o = parse({"--nodes", "1", "--rdzv-backend", "etcd", "--", "worker"});
  const std::string script = renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  const std::string data = dir_ + "/taehv-etcd-9-0-0";
  writeExecutable(dir_ + "/scontrol", "#!/bin/sh\necho 127.0.0.1\n");
  writeExecutable(dir_ + "/srun",
                  "#!/bin/bash\n"
                  "if [ \"$1\" = --overlap ]; then  # a member: its command runs here, in its own process group\n"
                  "  while [ $# -gt 0 ]; do case $1 in -w) shift 2 ;; -*) shift ;; *) break ;; esac; done\n"
                  "  setsid \"$@\" & c=$!\n"
                  "  echo $c > " + dir_ + "/member.pgid\n"
                  "  trap 'kill -USR1 -- -$c 2>/dev/null' USR1  # as slurmstepd: to the whole step\n"
                  "  while kill -0 $c 2>/dev/null; do wait $c; done\n"
                  "  exit 0\n"
                  "fi\n"
                  "echo \"srun $*\" >> " + dir_ + "/log\n"
                  "[ -d " + data + "/member ] && echo 'step: the member has its data'\n"
                  "echo 'step: this line goes to stderr' >&2\n"
                  "kill -TERM -- -$(cat " + dir_ + "/member.pgid)  # as scancel: TERM to every step\n"
                  "sleep 0.3\n");
  // rm takes a while: the script's USR1 at its end reaches the member's step while rm runs (as on the real cluster).
  writeExecutable(dir_ + "/rm", "#!/bin/sh\nsleep 1\nexec /bin/rm \"$@\"\n");
  std::ofstream(dir_ + "/job.sh") << script;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cmd = "cd " + dir_ + " && PATH=" + dir_ + ":$PATH SLURM_JOB_ID=9 SLURM_JOB_NODELIST=n1 TMPDIR=" +
                          dir_ + " TAEHV_ETCD_WAIT_S=20 TAEHV_ETCD_CLIENT_PORT=" + std::to_string(client_port) +
                          " TAEHV_ETCD_PEER_PORT=" + std::to_string(peer_port) + " timeout 60 bash job.sh > out 2>&1";
  const int status = system(cmd.c_str());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ifstream in(dir_ + "/out");
  std::stringstream out;
  out << in.rdbuf();
  EXPECT_EQ(WEXITSTATUS(status), 0) << out.str();
  EXPECT_LT(secs, 20) << out.str();
  const std::string endpoint = "127.0.0.1:" + std::to_string(client_port);
  EXPECT_TRUE(contains(out.str(), "taehv: etcd at " + endpoint + ", healthy after ")) << out.str();
  EXPECT_TRUE(contains(out.str(), "step: the member has its data\n")) << out.str();
  EXPECT_TRUE(contains(out.str(), "step: this line goes to stderr\n")) << "the script lost its stderr:\n" << out.str();
  EXPECT_FALSE(contains(out.str(), "Killed")) << out.str();
  std::ifstream log(dir_ + "/log");
  std::stringstream step;
  step << log.rdbuf();
  EXPECT_TRUE(contains(step.str(), "--rdzv-backend etcd --rdzv-endpoint " + endpoint + " -- worker")) << step.str();
  EXPECT_NE(access(data.c_str(), F_OK), 0) << "the member's data directory stayed: " << data;
  EXPECT_NE(system(("pgrep -f -- '--data-[d]ir " + data + "' >/dev/null").c_str()), 0) << "the etcd member still runs";
}

// A member's client port held by a listener that never answers (found on the real cluster: the health probe without
// a time limit would wait on it until the job's time limit). The probe gives up on it after 5 s, the script after
// TAEHV_ETCD_WAIT_S: one line naming the port and how to pick others, exit 2, no training step, the member's data
// removed.
TEST_F(FakeCluster, EtcdPortHeldBySilentListenerIsOneLineAndExitTwo) {
  if (system("command -v etcd >/dev/null && command -v python3 >/dev/null") != 0) GTEST_SKIP() << "needs etcd, python3";
  const int client_port = taehv::testing::freeLowPort(), peer_port = taehv::testing::freeLowPort();
  ASSERT_TRUE(client_port > 0 && peer_port > 0 && client_port != peer_port);
  const std::string silent = dir_ + "/silent.pid";
  ASSERT_EQ(system(("python3 -c 'import socket,time\ns=socket.socket(); s.bind((\"0.0.0.0\", " +
                    std::to_string(client_port) + ")); s.listen(); time.sleep(60)' </dev/null >/dev/null 2>&1 & echo $! > " +
                    silent + "; sleep 0.5")
                       .c_str()),
            0);
  const SubmitOptions o = parse({"--nodes", "1", "--rdzv-backend", "etcd", "--", "worker"});
  std::ofstream(dir_ + "/job.sh") << renderSbatchScript(o, "/x/taehv-run", "0.1.0");
  writeExecutable(dir_ + "/scontrol", "#!/bin/sh\necho 127.0.0.1\n");
  writeExecutable(dir_ + "/srun",
                  "#!/bin/bash\n"
                  "if [ \"$1\" = --overlap ]; then\n"
                  "  while [ $# -gt 0 ]; do case $1 in -w) shift 2 ;; -*) shift ;; *) break ;; esac; done\n"
                  "  exec \"$@\"\n"
                  "fi\n"
                  "echo \"srun $*\" >> " + dir_ + "/log\n");
  const auto t0 = std::chrono::steady_clock::now();
  const int status = system(("cd " + dir_ + " && PATH=" + dir_ + ":$PATH SLURM_JOB_ID=9 SLURM_JOB_NODELIST=n1 TMPDIR=" +
                             dir_ + " TAEHV_ETCD_WAIT_S=2 TAEHV_ETCD_CLIENT_PORT=" + std::to_string(client_port) +
                             " TAEHV_ETCD_PEER_PORT=" + std::to_string(peer_port) + " timeout 30 bash job.sh > out 2>&1")
                                .c_str());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  system(("kill $(cat " + silent + ")").c_str());
  std::ifstream in(dir_ + "/out");
  std::stringstream out;
  out << in.rdbuf();
  EXPECT_EQ(WEXITSTATUS(status), 2) << out.str();
  EXPECT_LT(secs, 15) << out.str();
  EXPECT_TRUE(contains(out.str(), "taehv: etcd on 127.0.0.1 did not answer healthy on port " +
                                      std::to_string(client_port) + " within 2 s (is etcd-server installed on the "
                                      "nodes, the port free? TAEHV_ETCD_CLIENT_PORT/TAEHV_ETCD_PEER_PORT pick others)"))
      << out.str();
  EXPECT_TRUE(contains(out.str(), "address already in use")) << "etcd's own line: " << out.str();
  EXPECT_NE(access((dir_ + "/log").c_str(), F_OK), 0) << "a training step ran";
  EXPECT_NE(access((dir_ + "/taehv-etcd-9-0-0").c_str(), F_OK), 0) << "the member's data directory stayed";
}

}  // namespace
}  // namespace taehv::slurm
