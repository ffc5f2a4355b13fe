// Rank descriptors: precedence (flag > backend plan > PET_* > default), provenance, expansion, validation.
#include "taehv/descriptor.h"

#include <gtest/gtest.h>

namespace taehv {
namespace {

constexpr int kCores = 8;
int noPort() { return 0; }

Checked<NodeDescriptor> resolve(const LaunchFlags& flags, const NodePlan* plan = nullptr, const Env& env = {},
                                const std::function<int()>& port = noPort) {
  return resolveNode(flags, plan, plan ? "test" : "local", env, "host-a", kCores, port);
}

TEST(Descriptor, DefaultsAreTorchrunsAndSaySo) {
  auto r = resolve({});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 1);
  EXPECT_EQ(*r.value.node_rank.value, 0);
  EXPECT_EQ(*r.value.nproc_per_node.value, 1);
  EXPECT_EQ(*r.value.master_addr.value, "127.0.0.1");
  EXPECT_EQ(*r.value.master_port.value, 29500);
  EXPECT_EQ(*r.value.run_id.value, "none");
  EXPECT_EQ(r.value.nnodes.source, "default");
  EXPECT_EQ(r.value.master_port.source, "default");
  EXPECT_EQ(r.value.nnodes.origin, Origin::kDefault);
  EXPECT_EQ(r.value.master_port.origin, Origin::kDefault);
}

TEST(Descriptor, FlagBeatsPlanBeatsPetBeatsDefault) {
  NodePlan plan;
  plan.nnodes.set(4, "env SLURM_NNODES");
  plan.node_rank.set(2, "env SLURM_NODEID");
  plan.master_addr.set("n1", "rule: first host of SLURM_JOB_NODELIST");
  Env env = {{"PET_NNODES", "8"}, {"PET_NODE_RANK", "7"}, {"PET_MASTER_PORT", "4000"}, {"PET_NPROC_PER_NODE", "5"}};
  LaunchFlags flags;
  flags.nproc_per_node = 3;
  auto r = resolve(flags, &plan, env);
  ASSERT_TRUE(r.ok()) << r.error;
  const NodeDescriptor& n = r.value;
  EXPECT_EQ(*n.nproc_per_node.value, 3);  // flag over PET_NPROC_PER_NODE
  EXPECT_EQ(n.nproc_per_node.source, "flag --nproc-per-node");
  EXPECT_EQ(*n.nnodes.value, 4);  // plan over PET_NNODES
  EXPECT_EQ(n.nnodes.source, "env SLURM_NNODES");
  EXPECT_EQ(*n.node_rank.value, 2);
  EXPECT_EQ(*n.master_addr.value, "n1");
  EXPECT_EQ(n.master_addr.source, "rule: first host of SLURM_JOB_NODELIST");
  EXPECT_EQ(*n.master_port.value, 4000);  // PET over default
  EXPECT_EQ(n.master_port.source, "env PET_MASTER_PORT");
  EXPECT_EQ(n.nproc_per_node.origin, Origin::kFlag);
  EXPECT_EQ(n.nnodes.origin, Origin::kBackend);
  EXPECT_EQ(n.master_port.origin, Origin::kPetEnv);

  flags.nnodes = 6;  // an explicit flag overrides even the platform
  flags.node_rank = 5;
  r = resolve(flags, &plan, env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 6);
  EXPECT_EQ(r.value.nnodes.source, "flag --nnodes");
}

// Behaviour keys on the origin, never on the text: a backend may word its sources as it likes.
TEST(Descriptor, ABackendSourceWordedDefaultIsStillTheBackends) {
  NodePlan plan;
  plan.nnodes.set(2, "env SOME_NNODES");
  plan.node_rank.set(1, "env SOME_RANK");
  plan.master_addr.set("head-0", "default");  // the plugin's own default, a real address all the same
  auto r = resolve({}, &plan, {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.master_addr.value, "head-0");
  EXPECT_EQ(r.value.master_addr.origin, Origin::kBackend);

  NodePlan no_master;  // the host's own loopback default with 2 nodes is refused, as before
  no_master.nnodes.set(2, "env SOME_NNODES");
  no_master.node_rank.set(1, "env SOME_RANK");
  r = resolve({}, &no_master, {});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("--master-addr"), std::string::npos) << r.error;
}

TEST(Descriptor, PetVariablesAreDefaultsInLocalMode) {
  Env env = {{"PET_NNODES", "2:2"}, {"PET_NODE_RANK", "1"}, {"PET_MASTER_ADDR", "10.0.0.1"}, {"PET_RDZV_ID", "job7"},
             {"PET_MAX_RESTARTS", "3"}};
  auto r = resolve({}, nullptr, env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 2);
  EXPECT_EQ(r.value.nnodes.source, "env PET_NNODES");
  EXPECT_EQ(*r.value.master_addr.value, "10.0.0.1");
  EXPECT_EQ(*r.value.run_id.value, "job7");
  EXPECT_EQ(*r.value.max_restarts.value, 3);
}

TEST(Descriptor, BadPetValuesAreErrorsNamingTheVariable) {
  auto r = resolve({}, nullptr, {{"PET_NNODES", "4:1"}});
  EXPECT_NE(r.error.find("env PET_NNODES '4:1': MIN 4 is more than MAX 1"), std::string::npos) << r.error;
  r = resolve({}, nullptr, {{"PET_NPROC_PER_NODE", "two"}});
  EXPECT_NE(r.error.find("PET_NPROC_PER_NODE='two' is not a whole number"), std::string::npos) << r.error;
}

// torchrun's MIN:MAX: nnodes is MAX (ranks and limits are checked against it), min_nnodes MIN; N:N is fixed.
TEST(Descriptor, NnodesMinMaxIsElasticAndNnNIsFixed) {
  auto r = resolve({}, nullptr, {{"PET_NNODES", "1:4"}, {"PET_NODE_RANK", "3"}, {"PET_MASTER_ADDR", "m"}});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 4);
  EXPECT_EQ(*r.value.min_nnodes.value, 1);
  EXPECT_TRUE(r.value.elastic());
  EXPECT_EQ(r.value.nnodesText(), "1:4");
  LaunchFlags flags;
  ASSERT_EQ(parseNnodes("3:3", "--nnodes", flags).error, "");
  flags.master_addr = "m";
  r = resolve(flags, nullptr, {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.value.elastic());
  EXPECT_EQ(r.value.nnodesText(), "3");
  // A backend fixes the node count: elastic is refused, not ignored.
  ASSERT_EQ(parseNnodes("1:2", "--nnodes", flags).error, "");
  NodePlan plan;
  r = resolve(flags, &plan, {});
  EXPECT_NE(r.error.find("--nnodes 1:2 (elastic, from flag --nnodes) needs each node's own taehv-run"),
            std::string::npos) << r.error;
  // ... unless the nodes form in etcd (the formation says who is in): a SLURM step's taehv-runs may re-form.
  LaunchFlags in_etcd = flags;
  in_etcd.formation_master = FormationMaster{"chosen at formation (--rdzv-backend etcd)", "10.0.0.1"};
  r = resolve(in_etcd, &plan, {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.value.elastic());
  EXPECT_EQ(r.value.nnodesText(), "1:2");
  in_etcd.no_node_group = true;
  EXPECT_NE(resolve(in_etcd, &plan, {}).error.find("fixes the node count"), std::string::npos);
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"2:1", "MIN 2 is more than MAX 1"}, {"0", "a job needs at least 1 node"}, {"0:2", "a job needs at least 1 node"},
           {"x", "not a node count"}, {"1:", "not a node count"}, {"1:2:3", "not a node count"}}) {
    LaunchFlags f;
    const std::string e = parseNnodes(text, "--nnodes", f).error;
    EXPECT_NE(e.find("--nnodes '" + text + "': " + why), std::string::npos) << text << ": " << e;
    EXPECT_NE(e.find("give N (a fixed count) or MIN:MAX"), std::string::npos) << e;
  }
  LaunchFlags big;
  ASSERT_EQ(parseNnodes("1:65537", "--nnodes", big).error, "");
  big.master_addr = "m";
  EXPECT_NE(resolve(big, nullptr, {}).error.find("node count must be at most 65536, got 65537 (from flag --nnodes)"),
            std::string::npos);
}

TEST(Descriptor, ExpansionIsNodeRankTimesNprocPlusLocalRank) {
  LaunchFlags flags;
  flags.nnodes = 3;
  flags.node_rank = 2;
  flags.nproc_per_node = 4;
  flags.master_addr = "m";
  auto r = resolve(flags);
  ASSERT_TRUE(r.ok()) << r.error;
  auto workers = expandWorkers(r.value, {});
  ASSERT_EQ(workers.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(*workers[i].local_rank.value, i);
    EXPECT_EQ(*workers[i].rank.value, 2 * 4 + i);
    EXPECT_EQ(*workers[i].world_size.value, 12);
    EXPECT_EQ(*workers[i].local_world_size.value, 4);
    EXPECT_EQ(workers[i].rank.source, "rule: node_rank*nproc_per_node+local_rank = 2*4+" + std::to_string(i));
  }
}

TEST(Descriptor, UnevenNodesFromThePlanGetContiguousRanksPerNode) {
  // Nodes of 2, 2, 2 and 1 processes (SLURM's 2(x3),1): node k starts at the counts of nodes 0..k-1.
  NodePlan plan;
  plan.nnodes.set(4, "env N");
  plan.master_addr.set("m", "env M");
  plan.node_nprocs.set({2, 2, 2, 1}, "env TPN");
  const std::vector<int> counts = {2, 2, 2, 1};
  int first = 0;
  for (int node = 0; node < 4; ++node) {
    plan.node_rank.set(node, "env R");
    plan.nproc_per_node.set(counts[node], "env TPN");
    auto r = resolve({}, &plan);
    ASSERT_TRUE(r.ok()) << r.error;
    auto workers = expandWorkers(r.value, {});
    ASSERT_EQ(static_cast<int>(workers.size()), counts[node]);
    for (int i = 0; i < counts[node]; ++i) {
      EXPECT_EQ(*workers[i].rank.value, first + i);
      EXPECT_EQ(*workers[i].local_rank.value, i);  // never RANK % local_procs
      EXPECT_EQ(*workers[i].world_size.value, 7);
      EXPECT_EQ(*workers[i].local_world_size.value, counts[node]);
      EXPECT_EQ(*workers[i].env["GROUP_RANK"].value, std::to_string(node));
    }
    EXPECT_EQ(*r.value.rankOffset().value, first);
    first += counts[node];
  }
  EXPECT_EQ(expandWorkers(resolve({}, &plan).value, {})[0].rank.source,
            "rule: rank_offset+local_rank = 6+0 (rank_offset: rule: processes of nodes 0..2 in 2(x3),1 (env TPN))");
}

TEST(Descriptor, PlanCountsThatDoNotFitAreErrors) {
  NodePlan plan;
  plan.nnodes.set(2, "env N");
  plan.node_rank.set(1, "env R");
  plan.nproc_per_node.set(1, "env P");
  plan.master_addr.set("m", "env M");
  plan.node_nprocs.set({3, 1, 1}, "env TPN");
  EXPECT_NE(resolve({}, &plan).error.find("per-node process counts 3,1(x2) (from env TPN) list 3 node(s) but nnodes is 2"),
            std::string::npos);
  plan.node_nprocs.set({3, 0}, "env TPN");
  EXPECT_NE(resolve({}, &plan).error.find("node 1 has 0; every node runs 1..1024 processes"), std::string::npos);
  plan.node_nprocs.set({3, 1}, "env TPN");
  LaunchFlags flags;
  flags.nproc_per_node = 2;
  EXPECT_NE(resolve(flags, &plan).error.find("processes per node 2 (from flag --nproc-per-node) contradicts the per-node "
                                             "counts 3,1 (from env TPN), which give node 1 1"),
            std::string::npos)
      << resolve(flags, &plan).error;
  plan.node_nprocs.set({1024, 1024, 1024}, "env TPN");
  plan.nnodes.set(3, "env N");
  plan.nproc_per_node.set(1024, "env P");
  EXPECT_TRUE(resolve({}, &plan).ok());
}

TEST(Descriptor, TheNodeGroupsAnswerReplacesTheUniformRule) {
  LaunchFlags flags;
  flags.nnodes = 2;
  flags.node_rank = 1;
  flags.nproc_per_node = 1;
  flags.master_addr = "m";
  auto r = resolve(flags);
  ASSERT_TRUE(r.ok()) << r.error;
  NodeDescriptor node = r.value;
  EXPECT_EQ(*node.rankOffset().value, 1);  // before the group: as if every node ran 1
  EXPECT_EQ(applyAgreedLayout(node, {2, 3, "node group: test"}).error, "");
  auto workers = expandWorkers(node, {});
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(*workers[0].rank.value, 2);
  EXPECT_EQ(*workers[0].world_size.value, 3);
  EXPECT_EQ(workers[0].world_size.source, "node group: test");
  NodeDescriptor other = r.value;
  EXPECT_NE(applyAgreedLayout(other, {3, 3, "x"}).error.find("ranks 3..3, outside the world size 3"), std::string::npos);
  EXPECT_NE(applyAgreedLayout(other, {0, kMaxWorldSize + 1, "x"}).error.find("outside 1..1048576"), std::string::npos);
}

TEST(Descriptor, ValidationErrorsNameTheFieldAndItsSource) {
  struct Case {
    LaunchFlags flags;
    std::string expect;
  };
  LaunchFlags rank_too_big;
  rank_too_big.nnodes = 2, rank_too_big.node_rank = 2, rank_too_big.master_addr = "m";
  LaunchFlags zero_procs;
  zero_procs.nproc_per_node = 0;
  LaunchFlags zero_nodes;
  zero_nodes.nnodes = 0;
  LaunchFlags bad_port;
  bad_port.master_port = 70000;
  LaunchFlags empty_master;
  empty_master.master_addr = "";
  LaunchFlags no_master;
  no_master.nnodes = 2;
  LaunchFlags negative_rank;
  negative_rank.node_rank = -1;
  for (const Case& c : std::vector<Case>{
           {rank_too_big, "node rank must be in 0..1 (nnodes 2), got 2 (from flag --node-rank)"},
           {zero_procs, "processes per node must be at least 1, got 0 (from flag --nproc-per-node)"},
           {zero_nodes, "node count must be at least 1, got 0 (from flag --nnodes)"},
           {bad_port, "master port must be in 1..65535, got 70000 (from flag --master-port)"},
           {empty_master, "master address is empty (from flag --master-addr)"},
           {no_master, "no master address was given; pass --master-addr"},
           {negative_rank, "node rank must be in 0..0"},
       }) {
    auto r = resolve(c.flags);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find(c.expect), std::string::npos) << "got: " << r.error << "\nwant: " << c.expect;
  }
}

// Issue 17, kind 3: counts near INT_MAX gave world_size -2 and RANK=-4. Every count is bounded and the world size
// is checked in 64 bits before any rank is computed.
TEST(HostileCounts, HugeCountsAreRefusedBeforeAnyProductOverflows) {
  struct Case {
    LaunchFlags flags;
    std::string expect;
  };
  LaunchFlags issue;  // the issue's example
  issue.nnodes = 2147483647, issue.node_rank = 2147483646, issue.nproc_per_node = 2, issue.master_addr = "m";
  LaunchFlags nodes;
  nodes.nnodes = kMaxNodes + 1, nodes.master_addr = "m";
  LaunchFlags procs;
  procs.nproc_per_node = kMaxNprocPerNode + 1;
  LaunchFlags world;  // each count within its limit, the product not
  world.nnodes = kMaxNodes, world.node_rank = kMaxNodes - 1, world.nproc_per_node = kMaxNprocPerNode;
  world.master_addr = "m";
  LaunchFlags restarts;
  restarts.max_restarts = 2147483647;
  LaunchFlags restart_count;
  restart_count.restart_count = kMaxRestarts + 1;
  for (const Case& c : std::vector<Case>{
           {issue, "node count must be at most 65536, got 2147483647 (from flag --nnodes)"},
           {nodes, "node count must be at most 65536, got 65537 (from flag --nnodes)"},
           {procs, "processes per node must be at most 1024, got 1025 (from flag --nproc-per-node)"},
           {world, "world size nnodes*nproc_per_node = 65536*1024 = 67108864 is more than the 1048576"},
           {restarts, "max restarts must be in 0..1000000, got 2147483647 (from flag --max-restarts)"},
           {restart_count, "restart count must be in 0..1000000, got 1000001"},
       }) {
    auto r = resolve(c.flags);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find(c.expect), std::string::npos) << "got: " << r.error << "\nwant: " << c.expect;
  }
  auto r = resolve({}, nullptr, {{"PET_NNODES", "2147483647"}, {"PET_MASTER_ADDR", "m"}});
  EXPECT_NE(r.error.find("got 2147483647 (from env PET_NNODES)"), std::string::npos) << r.error;
}

TEST(HostileCounts, TheLargestAllowedJobHasNoNegativeRank) {
  LaunchFlags flags;
  flags.nnodes = kMaxWorldSize / 16, flags.node_rank = kMaxWorldSize / 16 - 1, flags.nproc_per_node = 16;
  flags.master_addr = "m";
  auto r = resolve(flags);
  ASSERT_TRUE(r.ok()) << r.error;
  auto workers = expandWorkers(r.value, {});
  ASSERT_EQ(workers.size(), 16u);
  EXPECT_EQ(*workers.back().rank.value, kMaxWorldSize - 1);
  EXPECT_EQ(*workers.back().world_size.value, kMaxWorldSize);
}

TEST(HostileCounts, APlatformsHugeCountsInSingleWorkerModeAreRefusedToo) {
  // The rank rule (node_rank * nproc_per_node + local_rank) runs only after the counts are checked.
  NodePlan plan;
  plan.nnodes.set(2147483647, "env TEST_NODES");
  plan.node_rank.set(2147483646, "env TEST_NODE");
  plan.nproc_per_node.set(4, "env TEST_TASKS");
  plan.local_rank.set(3, "env TEST_LOCAL");
  plan.single_worker.set(true, "test");
  plan.master_addr.set("m", "test");
  auto r = resolve({}, &plan);
  EXPECT_NE(r.error.find("node count must be at most 65536, got 2147483647 (from env TEST_NODES)"),
            std::string::npos)
      << r.error;
}

// The etcd group chooses the master at each formation: no --master-addr is needed, master_addr says so and stands in
// as the first etcd endpoint's host; a given one is kept with a note; one node, or a TCP group, asks for it as before.
TEST(Descriptor, AMasterChosenAtFormationNeedsNoMasterAddrAndSaysWhereItComesFrom) {
  LaunchFlags flags;
  flags.nnodes = 2;
  auto fixed = resolve(flags);
  EXPECT_NE(fixed.error.find("no master address was given"), std::string::npos) << fixed.error;

  flags.formation_master = FormationMaster{"chosen at formation (--rdzv-backend etcd)", "10.0.0.1"};
  auto r = resolve(flags);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.master_addr.value, "10.0.0.1");
  EXPECT_EQ(r.value.master_addr.source,
            "chosen at formation (--rdzv-backend etcd); until then the first etcd endpoint's host");
  EXPECT_EQ(r.value.master_addr.origin, Origin::kRule);
  ASSERT_TRUE(r.value.formation_master.has_value());

  flags.master_addr = "10.9.9.9";
  auto given = resolve(flags);
  ASSERT_TRUE(given.ok()) << given.error;
  EXPECT_EQ(given.value.master_addr.source, "flag --master-addr");
  ASSERT_FALSE(given.value.notes.empty());
  EXPECT_NE(given.value.notes.back().find("is not the workers' master: it is chosen at formation"), std::string::npos)
      << given.value.notes.back();

  // One node: no group forms, master_addr is the master (the loopback default).
  LaunchFlags one;
  one.formation_master = flags.formation_master;
  auto single = resolve(one);
  ASSERT_TRUE(single.ok()) << single.error;
  EXPECT_EQ(single.value.master_addr.source, "default");
  EXPECT_FALSE(single.value.formation_master.has_value());
}

TEST(Descriptor, StandaloneTakesAFreePortAndARunId) {
  LaunchFlags flags;
  flags.standalone = true;
  flags.nproc_per_node = 2;
  int calls = 0;
  auto r = resolve(flags, nullptr, {{"PET_MASTER_PORT", "1234"}}, [&] { return ++calls, 41234; });
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(*r.value.master_port.value, 41234);
  EXPECT_EQ(r.value.master_port.source, "flag --standalone (free port)");
  EXPECT_EQ(*r.value.master_addr.value, "127.0.0.1");
  EXPECT_NE(*r.value.run_id.value, "none");

  flags.master_port = 5555;  // an explicit port wins and no port is probed
  r = resolve(flags, nullptr, {}, [&] { return ++calls, 1; });
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(*r.value.master_port.value, 5555);

  flags.nnodes = 2;
  r = resolve(flags);
  EXPECT_NE(r.error.find("--standalone runs one node, but --nnodes 2"), std::string::npos) << r.error;
}

TEST(Descriptor, SingleWorkerTakesRankFromThePlan) {
  NodePlan plan;
  plan.nnodes.set(2, "env OMPI_A");
  plan.node_rank.set(1, "env OMPI_B");
  plan.nproc_per_node.set(2, "env OMPI_LOCAL_SIZE");
  plan.master_addr.set("m", "env MASTER_ADDR");
  plan.single_worker.set(true, "rule: mpirun started this process");
  plan.rank.set(3, "env OMPI_COMM_WORLD_RANK");
  plan.local_rank.set(1, "env OMPI_COMM_WORLD_LOCAL_RANK");
  auto r = resolve({}, &plan);
  ASSERT_TRUE(r.ok()) << r.error;
  auto workers = expandWorkers(r.value, {});
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(*workers[0].rank.value, 3);
  EXPECT_EQ(workers[0].rank.source, "env OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(*workers[0].world_size.value, 4);

  plan.rank.set(4, "env OMPI_COMM_WORLD_RANK");
  r = resolve({}, &plan);
  EXPECT_NE(r.error.find("rank must be in 0..3 (world size 4), got 4 (from env OMPI_COMM_WORLD_RANK)"),
            std::string::npos)
      << r.error;
}

TEST(Descriptor, DeviceIsLocalRankOnAGpuNode) {
  NodePlan plan;
  plan.nproc_per_node.set(2, "test");
  plan.gpus_on_node.set(2, "env TEST_GPUS");
  auto r = resolve({}, &plan);
  ASSERT_TRUE(r.ok()) << r.error;
  auto workers = expandWorkers(r.value, {});
  EXPECT_EQ(*workers[1].device.value, 1);
  r = resolve({});
  EXPECT_FALSE(expandWorkers(r.value, {})[0].device.has());
}

TEST(Descriptor, ParseIntRejectsPartialNumbers) {
  EXPECT_EQ(parseInt("12"), 12);
  EXPECT_EQ(parseInt("-3"), -3);
  EXPECT_FALSE(parseInt(""));
  EXPECT_FALSE(parseInt("1x"));
  EXPECT_FALSE(parseInt("99999999999"));
}

}  // namespace
}  // namespace taehv
