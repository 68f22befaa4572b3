// The independent reference for Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (naive_hf.h), written from
// docs/specs/qwen3_next.md (transformers' Qwen3NextGatedDeltaNet, Qwen3NextAttention,
// Qwen3NextSparseMoeBlock and their Qwen3.5 forms), not from sinkscope's model/ or kernels/: it
// reads the tensors under their Hugging Face names and layouts (the grouped in_proj_qkvz /
// in_proj_ba, q_proj's per-head [query | gate], the fused experts.gate_up_proj), runs the delta
// rule in its recurrent form token by token in double precision, and the attention as plain loops.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/error.h"
#include "naive_hf.h"

namespace ss::test {
namespace {

using Vec = std::vector<double>;

const Tensor& Get(const HfTensors& w, const std::string& name) {
  auto it = w.find(name);
  if (it == w.end()) Fail("naive Qwen3.5 reference: no tensor {}", name);
  return it->second;
}

// y = W x, W (out, in) as nn.Linear; `row0`: start at that row of W (a stacked expert).
Vec Linear(const Vec& x, const Tensor& W, int64_t rows = -1, int64_t row0 = 0) {
  const int64_t in = W.dim(W.rank() - 1);
  if (rows < 0) rows = W.numel() / in;
  Vec y(rows);
  for (int64_t o = 0; o < rows; ++o) {
    double s = 0;
    for (int64_t i = 0; i < in; ++i) s += W[(row0 + o) * in + i] * x[i];
    y[o] = s;
  }
  return y;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Silu(double x) { return x * Sigmoid(x); }
double Softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

// Qwen3NextRMSNorm: x / rms(x) * (1 + w), over `n` values from `offset`.
void Rms1(double* x, int n, const Tensor& w, double eps) {
  double ms = 0;
  for (int i = 0; i < n; ++i) ms += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ms / n + eps);
  for (int i = 0; i < n; ++i) x[i] = x[i] * inv * (1.0 + w[i]);
}

bool ImageText(const std::string& arch) { return arch == "qwen3_5" || arch == "qwen3_5_moe"; }

}  // namespace

bool IsQwen35Family(const std::string& arch) {
  return arch == "qwen3_next" || arch.rfind("qwen3_5", 0) == 0;
}

std::vector<float> NaiveQwen35Forward(const ModelConfig& c, const HfTensors& w,
                                      const std::vector<int>& tokens) {
  const std::string prefix = ImageText(c.arch) ? "model.language_model." : "model.";
  const bool next = c.arch == "qwen3_next";
  const int T = static_cast<int>(tokens.size()), D = c.dim;
  const int nk = c.linear_k_heads, nv = c.linear_v_heads, dk = c.linear_k_dim;
  const int dv = c.linear_v_dim, r = nv / nk, Kd = nk * dk, Vd = nv * dv, C = 2 * Kd + Vd;
  const int K = c.linear_conv, H = c.n_heads, Hkv = c.n_kv_heads, Dh = c.head_dim;
  const int R = c.rotary_dim > 0 ? c.rotary_dim : Dh;  // rotated dims of each head
  const double eps = c.norm_eps;
  const Tensor& embed = Get(w, prefix + "embed_tokens.weight");
  std::vector<Vec> x(T, Vec(D));
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < D; ++d) x[t][d] = embed[static_cast<int64_t>(tokens[t]) * D + d];

  for (int l = 0; l < c.n_layers; ++l) {
    const std::string at = fmt::format("{}layers.{}.", prefix, l);
    std::vector<Vec> h = x;
    for (Vec& row : h) Rms1(row.data(), D, Get(w, at + "input_layernorm.weight"), eps);
    std::vector<Vec> mixed(T, Vec(D, 0.0));
    if (c.LinearLayer(l)) {
      const std::string la = at + "linear_attn.";
      // Projections (§3 for Qwen3-Next's grouped layouts), into the convolution's q | k | v.
      std::vector<Vec> qkv(T, Vec(C)), z(T, Vec(Vd)), b(T, Vec(nv)), a(T, Vec(nv));
      for (int t = 0; t < T; ++t) {
        if (next) {
          const Vec p = Linear(h[t], Get(w, la + "in_proj_qkvz.weight"));
          const Vec q = Linear(h[t], Get(w, la + "in_proj_ba.weight"));
          const int G = 2 * dk + 2 * r * dv;
          for (int g = 0; g < nk; ++g) {
            const double* grp = p.data() + static_cast<int64_t>(g) * G;
            for (int i = 0; i < dk; ++i) {
              qkv[t][g * dk + i] = grp[i];
              qkv[t][Kd + g * dk + i] = grp[dk + i];
            }
            for (int i = 0; i < r * dv; ++i) {
              qkv[t][2 * Kd + g * r * dv + i] = grp[2 * dk + i];
              z[t][g * r * dv + i] = grp[2 * dk + r * dv + i];
            }
            for (int j = 0; j < r; ++j) {
              b[t][g * r + j] = q[g * 2 * r + j];
              a[t][g * r + j] = q[g * 2 * r + r + j];
            }
          }
        } else {
          qkv[t] = Linear(h[t], Get(w, la + "in_proj_qkv.weight"));
          z[t] = Linear(h[t], Get(w, la + "in_proj_z.weight"));
          b[t] = Linear(h[t], Get(w, la + "in_proj_b.weight"));
          a[t] = Linear(h[t], Get(w, la + "in_proj_a.weight"));
        }
      }
      // Causal depthwise convolution with SiLU: tap K - 1 multiplies the current token (§4.2).
      const Tensor& conv = Get(w, la + "conv1d.weight");
      std::vector<Vec> u(T, Vec(C));
      for (int t = 0; t < T; ++t)
        for (int ch = 0; ch < C; ++ch) {
          double s = 0;
          for (int j = 0; j < K; ++j) {
            const int tau = t - (K - 1) + j;
            if (tau >= 0) s += conv[static_cast<int64_t>(ch) * K + j] * qkv[tau][ch];
          }
          u[t][ch] = Silu(s);
        }
      const Tensor& a_log = Get(w, la + "A_log");
      const Tensor& dt_bias = Get(w, la + "dt_bias");
      const Tensor& norm = Get(w, la + "norm.weight");
      // The recurrence per value head (§4.8), S (dk, dv) from zero.
      std::vector<Vec> S(nv, Vec(static_cast<size_t>(dk) * dv, 0.0));
      std::vector<Vec> y(T, Vec(Vd));
      for (int t = 0; t < T; ++t) {
        for (int hv = 0; hv < nv; ++hv) {
          const int kh = hv / r;  // value head hv reads key head hv / r (§4.5)
          Vec q(dk), k(dk), v(dv);
          double qq = 0, kk = 0;
          for (int i = 0; i < dk; ++i) {
            q[i] = u[t][kh * dk + i];
            k[i] = u[t][Kd + kh * dk + i];
            qq += q[i] * q[i];
            kk += k[i] * k[i];
          }
          for (int i = 0; i < dk; ++i) {
            q[i] /= std::sqrt(qq + 1e-6) * std::sqrt(static_cast<double>(dk));
            k[i] /= std::sqrt(kk + 1e-6);
          }
          for (int j = 0; j < dv; ++j) v[j] = u[t][2 * Kd + hv * dv + j];
          const double beta = Sigmoid(b[t][hv]);
          const double g =
              -std::exp(static_cast<double>(a_log[hv])) * Softplus(a[t][hv] + dt_bias[hv]);
          Vec& s = S[hv];
          for (double& e : s) e *= std::exp(g);
          Vec m(dv, 0.0);
          for (int i = 0; i < dk; ++i)
            for (int j = 0; j < dv; ++j) m[j] += s[i * dv + j] * k[i];
          for (int i = 0; i < dk; ++i)
            for (int j = 0; j < dv; ++j) s[i * dv + j] += k[i] * beta * (v[j] - m[j]);
          Vec o(dv, 0.0);
          for (int i = 0; i < dk; ++i)
            for (int j = 0; j < dv; ++j) o[j] += s[i * dv + j] * q[i];
          // Gated RMSNorm, plain weight (§4.10).
          double ms = 0;
          for (double e : o) ms += e * e;
          const double inv = 1.0 / std::sqrt(ms / dv + eps);
          for (int j = 0; j < dv; ++j)
            y[t][hv * dv + j] = norm[j] * o[j] * inv * Silu(z[t][hv * dv + j]);
        }
        mixed[t] = Linear(y[t], Get(w, la + "out_proj.weight"));
      }
    } else {
      const std::string sa = at + "self_attn.";
      std::vector<Vec> q(T, Vec(H * Dh)), gate(T, Vec(H * Dh)), k(T), v(T);
      for (int t = 0; t < T; ++t) {
        const Vec qg = Linear(h[t], Get(w, sa + "q_proj.weight"));
        for (int hh = 0; hh < H; ++hh)  // per head [query | gate] (§5.1)
          for (int i = 0; i < Dh; ++i) {
            q[t][hh * Dh + i] = qg[2 * hh * Dh + i];
            gate[t][hh * Dh + i] = qg[2 * hh * Dh + Dh + i];
          }
        k[t] = Linear(h[t], Get(w, sa + "k_proj.weight"));
        v[t] = Linear(h[t], Get(w, sa + "v_proj.weight"));
        for (int hh = 0; hh < H; ++hh) Rms1(&q[t][hh * Dh], Dh, Get(w, sa + "q_norm.weight"), eps);
        for (int hh = 0; hh < Hkv; ++hh)
          Rms1(&k[t][hh * Dh], Dh, Get(w, sa + "k_norm.weight"), eps);
        // rotate_half RoPE on the first R dims of each head (§5.4).
        auto rope = [&](double* head) {
          for (int i = 0; i < R / 2; ++i) {
            const double angle = t * std::pow(static_cast<double>(c.rope_theta), -2.0 * i / R);
            const double x0 = head[i], x1 = head[i + R / 2];
            head[i] = x0 * std::cos(angle) - x1 * std::sin(angle);
            head[i + R / 2] = x1 * std::cos(angle) + x0 * std::sin(angle);
          }
        };
        for (int hh = 0; hh < H; ++hh) rope(&q[t][hh * Dh]);
        for (int hh = 0; hh < Hkv; ++hh) rope(&k[t][hh * Dh]);
      }
      for (int t = 0; t < T; ++t) {
        Vec zt(H * Dh, 0.0);
        for (int hh = 0; hh < H; ++hh) {
          const int kvh = hh / (H / Hkv);
          Vec score(t + 1);
          for (int j = 0; j <= t; ++j) {
            double s = 0;
            for (int i = 0; i < Dh; ++i) s += q[t][hh * Dh + i] * k[j][kvh * Dh + i];
            score[j] = s / std::sqrt(static_cast<double>(Dh));
          }
          const double mx = *std::max_element(score.begin(), score.end());
          double sum = 0;
          for (double& s : score) sum += (s = std::exp(s - mx));
          for (int j = 0; j <= t; ++j)
            for (int i = 0; i < Dh; ++i) zt[hh * Dh + i] += score[j] / sum * v[j][kvh * Dh + i];
        }
        for (int i = 0; i < H * Dh; ++i) zt[i] *= Sigmoid(gate[t][i]);  // the output gate (§5.6)
        mixed[t] = Linear(zt, Get(w, sa + "o_proj.weight"));
      }
    }
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d) x[t][d] += mixed[t][d];

    // The FFN (§6.2, §6.3).
    const std::string mlp = at + "mlp.";
    for (int t = 0; t < T; ++t) {
      Vec h2 = x[t];
      Rms1(h2.data(), D, Get(w, at + "post_attention_layernorm.weight"), eps);
      auto swiglu = [&](const Tensor& gate_w, const Tensor& up_w, const Tensor& down_w, int64_t F,
                        int64_t gate_row0, int64_t up_row0, int64_t down_row0) {
        const Vec g = Linear(h2, gate_w, F, gate_row0), u = Linear(h2, up_w, F, up_row0);
        Vec act(F);
        for (int64_t i = 0; i < F; ++i) act[i] = Silu(g[i]) * u[i];
        return Linear(act, down_w, D, down_row0);
      };
      Vec out(D, 0.0);
      if (!c.MoeLayer(l)) {
        out = swiglu(Get(w, mlp + "gate_proj.weight"), Get(w, mlp + "up_proj.weight"),
                     Get(w, mlp + "down_proj.weight"), c.FfnWidth(l), 0, 0, 0);
      } else {
        const int E = c.n_experts, F = c.hidden_dim;
        Vec p = Linear(h2, Get(w, mlp + "gate.weight"));
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (double& e : p) e /= sum;
        std::vector<int> order(E);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return p[i] > p[j]; });
        double kept = 0;
        for (int j = 0; j < c.n_experts_per_tok; ++j) kept += p[order[j]];
        for (int j = 0; j < c.n_experts_per_tok; ++j) {
          const int e = order[j];
          const double weight = c.norm_topk_prob ? p[e] / kept : p[e];
          Vec y;
          if (next) {
            const std::string ex = fmt::format("{}experts.{}.", mlp, e);
            y = swiglu(Get(w, ex + "gate_proj.weight"), Get(w, ex + "up_proj.weight"),
                       Get(w, ex + "down_proj.weight"), F, 0, 0, 0);
          } else {  // fused (E, 2F, D): gate rows first, then up; down (E, D, F)
            const Tensor& gu = Get(w, mlp + "experts.gate_up_proj");
            y = swiglu(gu, gu, Get(w, mlp + "experts.down_proj"), F, int64_t{2} * e * F,
                       int64_t{2} * e * F + F, int64_t{e} * D);
          }
          for (int d = 0; d < D; ++d) out[d] += weight * y[d];
        }
        const Vec shared = swiglu(Get(w, mlp + "shared_expert.gate_proj.weight"),
                                  Get(w, mlp + "shared_expert.up_proj.weight"),
                                  Get(w, mlp + "shared_expert.down_proj.weight"),
                                  c.shared_expert_hidden_dim, 0, 0, 0);
        const double s = Sigmoid(Linear(h2, Get(w, mlp + "shared_expert_gate.weight"))[0]);
        for (int d = 0; d < D; ++d) out[d] += s * shared[d];
      }
      for (int d = 0; d < D; ++d) x[t][d] += out[d];
    }
  }
  const Tensor& head = c.tied_embeddings ? embed : Get(w, "lm_head.weight");
  std::vector<float> logits;
  for (Vec& row : x) {
    Rms1(row.data(), D, Get(w, prefix + "norm.weight"), eps);
    for (double e : Linear(row, head)) logits.push_back(static_cast<float>(e));
  }
  return logits;
}

HfTensors RandomQwen35Weights(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.2f);
  HfTensors w;
  auto rnd = [&](const std::string& name, std::vector<int64_t> shape, float mean = 0.0f) {
    Tensor t = Tensor::Zeros(std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = mean + dist(rng);
    w[name] = t;
  };
  const std::string prefix = ImageText(c.arch) ? "model.language_model." : "model.";
  const bool next = c.arch == "qwen3_next";
  const int64_t D = c.dim, V = c.vocab_size, H = c.n_heads, Dh = c.head_dim;
  const int64_t nv = c.linear_v_heads, Kd = c.linear_qk_dim(), Vd = c.linear_value_dim();
  rnd(prefix + "embed_tokens.weight", {V, D});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string at = fmt::format("{}layers.{}.", prefix, l);
    rnd(at + "input_layernorm.weight", {D});  // 1 + w: near 1 around w = 0
    rnd(at + "post_attention_layernorm.weight", {D});
    if (c.LinearLayer(l)) {
      const std::string la = at + "linear_attn.";
      if (next) {
        rnd(la + "in_proj_qkvz.weight", {2 * Kd + 2 * Vd, D});
        rnd(la + "in_proj_ba.weight", {2 * nv, D});
      } else {
        rnd(la + "in_proj_qkv.weight", {2 * Kd + Vd, D});
        rnd(la + "in_proj_z.weight", {Vd, D});
        rnd(la + "in_proj_b.weight", {nv, D});
        rnd(la + "in_proj_a.weight", {nv, D});
      }
      rnd(la + "conv1d.weight", {2 * Kd + Vd, 1, c.linear_conv}, 0.3f);
      rnd(la + "dt_bias", {nv});
      rnd(la + "A_log", {nv}, -1.0f);  // decays near 0.7 a token: the state remembers
      rnd(la + "norm.weight", {c.linear_v_dim}, 1.0f);
      rnd(la + "out_proj.weight", {D, Vd});
    } else {
      const std::string sa = at + "self_attn.";
      rnd(sa + "q_proj.weight", {2 * H * Dh, D});
      rnd(sa + "k_proj.weight", {c.kv_dim(), D});
      rnd(sa + "v_proj.weight", {c.kv_dim(), D});
      rnd(sa + "o_proj.weight", {D, H * Dh});
      rnd(sa + "q_norm.weight", {Dh});
      rnd(sa + "k_norm.weight", {Dh});
    }
    const std::string mlp = at + "mlp.";
    if (!c.MoeLayer(l)) {
      const int64_t F = c.FfnWidth(l);
      rnd(mlp + "gate_proj.weight", {F, D});
      rnd(mlp + "up_proj.weight", {F, D});
      rnd(mlp + "down_proj.weight", {D, F});
      continue;
    }
    const int64_t E = c.n_experts, F = c.hidden_dim, Fs = c.shared_expert_hidden_dim;
    rnd(mlp + "gate.weight", {E, D});
    if (next) {
      for (int64_t e = 0; e < E; ++e) {
        const std::string ex = fmt::format("{}experts.{}.", mlp, e);
        rnd(ex + "gate_proj.weight", {F, D});
        rnd(ex + "up_proj.weight", {F, D});
        rnd(ex + "down_proj.weight", {D, F});
      }
    } else {
      rnd(mlp + "experts.gate_up_proj", {E, 2 * F, D});
      rnd(mlp + "experts.down_proj", {E, D, F});
    }
    rnd(mlp + "shared_expert.gate_proj.weight", {Fs, D});
    rnd(mlp + "shared_expert.up_proj.weight", {Fs, D});
    rnd(mlp + "shared_expert.down_proj.weight", {D, Fs});
    rnd(mlp + "shared_expert_gate.weight", {1, D});
  }
  rnd(prefix + "norm.weight", {D});
  if (!c.tied_embeddings) rnd("lm_head.weight", {V, D});
  return w;
}

}  // namespace ss::test
