// idealized.h — the idealized retrieval model of paper §1.7 ("Why compression concentrates"):
// near-equiangular embeddings, contexts of L chunks of S distinct tokens, m heads that compress each
// chunk with key/value distributions over the S offsets, a softmax over chunks at scale gamma, summed
// head outputs unembedded at scale beta, and the cross-entropy of predicting the successor of a
// repeated non-final token — forward and analytic backward, in plain double-precision loops.
// Not here: the gradient-flow loop, seeds and summaries (flow.h) or any output (report.h).
// No libtorch: every function is a readable scalar reference.
//
// Letters: N = vocabulary (embeddings), D = embedding dim = 1 + N + P, P = perturbation dims,
// S = offsets per chunk, L = chunks per context, M = heads (the paper's m), B = contexts in a batch.
// Offsets r = 0..S-1; a query sits at offset r* in 0..S-2 (a non-final token) and its target is the
// token at r*+1 of the same chunk; offset S-1 (the boundary phase) is never a query.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace phasescope {

// How a head turns a chunk into its distribution over offsets.
enum class TheoryGate {
  LogLinear,  // p(r) ∝ exp<c_{h,r}, x_{l,r}>: content-dependent, Theorem 2's gates (params (M, S, D))
  Static,     // p(r) ∝ exp(theta_{h,r}): one distribution for every chunk (params (M, S, 1))
};
const char* theory_gate_name(TheoryGate gate);          // "loglinear" / "static"
TheoryGate theory_gate_parse(const std::string& name);  // throws Error on anything else

// One simulation's configuration; example values are the CLI defaults.
struct TheoryConfig {
  int N = 64;            // vocabulary size
  int S = 4;             // tokens per chunk (offsets)
  int L = 4;             // chunks per context; tokens are distinct across the context, so L*S <= N
  int heads = 2;         // M, heads; the paper asks m < S
  double kappa = 0.5;    // shared overlap: x.x' = kappa for x != x' (plus at most epsilon)
  double epsilon = 0.0;  // |x.x' - kappa - 1{x = x'}| <= epsilon
  // Theorem 1 needs N large against e^beta: with beta = 8 and N = 64 a head spread over two offsets
  // beats one-hot heads (the loss saturates); beta = 2, gamma = 4 sit inside the theorem's regime.
  double gamma = 4.0;        // attention scale of the softmax over chunks
  double beta = 2.0;         // unembedding scale
  double rho = 0.1;          // each gate's parameter block starts uniform in the ball of this radius
  double lr = 2.0;           // gradient-descent step (small steps approximate gradient flow)
  int steps = 4000;          // maximum number of steps
  int batch = 64;            // contexts per step when the loss is sampled
  int eval_contexts = 2048;  // fixed contexts for the final sampled loss and masses
  double onehot = 0.9;       // a distribution is "one-hot" when its mean mass at the argmax >= this
  double stop_mass = 0.95;   // stop early once every head's key and value mass >= this (0: never)
  int record_every = 10;     // trajectory point every this many steps (0: first and last only)
  TheoryGate gate = TheoryGate::LogLinear;
  // Head coverage: the term the idealized model lacks. The objective adds
  //   coverage x sum over head pairs h < h' of <pbar^K_h, pbar^K_h'> + <pbar^V_h, pbar^V_h'>,
  // pbar the head's distribution averaged over the batch's contexts and chunks: heads on one offset
  // pay for it, heads on distinct offsets do not. 0 = the paper's model.
  double coverage = 0.0;
};

// Throws phasescope::Error naming the field and the fix when a value is out of range.
void theory_validate(const TheoryConfig& cfg);

// The population loss is exact only for static gates at epsilon = 0 (then every context with the
// same query offset has the same loss, by symmetry); otherwise it is a seeded sampled estimate.
bool theory_loss_is_exact(const TheoryConfig& cfg);

// ----------------------------------------------------------------------------------------------
// embeddings

// x_i = sqrt(kappa) u0 + e_i + eta_i with u0, e_1..e_N orthonormal and eta_i in P further dims,
// |eta_i| <= sqrt(epsilon), so x_i.x_j = kappa + 1{i=j} + eta_i.eta_j and |eta_i.eta_j| <= epsilon.
struct TheoryEmbeddings {
  int N = 0, D = 0;
  std::vector<double> X;  // (N, D) row-major: X[i*D + k]
  std::vector<double> G;  // (N, N) Gram matrix G[i*N + j] = x_i . x_j
  // X's nonzeros by row (2 + P per row at most; 2 at epsilon = 0), so gate logits and the logits
  // beta * X o cost O(N (P + 2)), not O(N D):
  // row i holds nz_col[k], nz_val[k] for k in [nz_row[i], nz_row[i+1])
  std::vector<int> nz_row, nz_col;  // (N+1), (nnz)
  std::vector<double> nz_val;       // (nnz)
  double max_deviation = 0;         // max over i,j of |G_ij - kappa - 1{i=j}|, <= epsilon by construction
};
constexpr int kTheoryPerturbDims = 8;  // P; fixed so that one seed gives one init for every epsilon
TheoryEmbeddings theory_make_embeddings(int N, double kappa, double epsilon, uint64_t seed);

// ----------------------------------------------------------------------------------------------
// contexts

struct TheoryContext {
  std::vector<int> tok;  // (L, S) token ids, distinct across the context: tok[l*S + r]
  int query_chunk = 0;   // l*: the repeated token is tok[l*, r*] and the target tok[l*, r*+1]
  int query_offset = 0;  // r* in 0..S-2
};

// Draws contexts uniformly (distinct tokens, uniform chunk); query offsets are stratified: context b
// gets r* = (b + first_offset) mod (S-1), so a batch of B contexts covers every offset evenly.
class TheoryContextSampler {
 public:
  TheoryContextSampler(int N, int S, int L, uint64_t seed);
  std::vector<TheoryContext> draw(int count);

 private:
  int N_, S_, L_;
  int next_offset_ = 0;
  std::vector<int> perm_;  // (N) a permutation, partially reshuffled per context
  uint64_t seed_;
  uint64_t drawn_ = 0;
};

// The S-1 contexts that give the exact population loss when theory_loss_is_exact: tokens 0..L*S-1 in
// order, query in chunk 0 at each offset r* = 0..S-2.
std::vector<TheoryContext> theory_canonical_contexts(const TheoryConfig& cfg);

// ----------------------------------------------------------------------------------------------
// gates

// Gate parameters of both branches. K = D for log-linear gates, 1 for static ones.
struct TheoryGates {
  TheoryGate kind = TheoryGate::LogLinear;
  int M = 0, S = 0, K = 0;
  std::vector<double> key;    // (M, S, K): c^K_{h,r} (log-linear) or theta^K_{h,r} (static)
  std::vector<double> value;  // (M, S, K)
};
TheoryGates theory_gates_zero(TheoryGate kind, int M, int S, int D);
// Each (head, branch) block of S*K numbers uniform in the ball of radius rho.
TheoryGates theory_gates_init(const TheoryConfig& cfg, int D, uint64_t seed);

// ----------------------------------------------------------------------------------------------
// loss

// Statistics of the distributions seen in a batch, over its contexts and chunks.
struct TheoryGateStats {
  std::vector<double> key_mean, value_mean;  // (M, S) mean p^K_h(r), p^V_h(r)
  std::vector<double> key_min, value_min;    // (M, S) min over contexts and chunks
};

// Mean cross-entropy over `contexts`, plus the coverage term when cfg.coverage > 0 (the objective that
// is descended; then it is no longer a pure cross-entropy). If grad is given (any shape; it is reset) it
// receives the analytic gradient of that mean with respect to every gate parameter; if stats is given, the
// distributions' means and minima. `per_context` (optional) receives each context's loss.
double theory_batch_loss(const TheoryConfig& cfg, const TheoryEmbeddings& emb, const TheoryGates& gates,
                         const std::vector<TheoryContext>& contexts, TheoryGates* grad,
                         TheoryGateStats* stats, std::vector<double>* per_context = nullptr);

// Explicit static distributions (Theorem 1's "assignments").
struct TheoryAssignment {
  int M = 0, S = 0;
  std::vector<double> key, value;  // (M, S), each row a distribution over offsets
};
// Mean cross-entropy of an assignment over `contexts` (the same distribution for every chunk).
double theory_assignment_loss(const TheoryConfig& cfg, const TheoryEmbeddings& emb, const TheoryAssignment& a,
                              const std::vector<TheoryContext>& contexts);

// One context, given the distributions of every head on every chunk: pk, pv are (M, L, S) with
// pk[(h*L + l)*S + r]. Returns the loss; when dpk/dpv are non-null they receive dloss/dpk, dloss/dpv.
double theory_context_loss(const TheoryConfig& cfg, const TheoryEmbeddings& emb, const TheoryContext& ctx,
                           const double* pk, const double* pv, double* dpk, double* dpv);

}  // namespace phasescope
