#include "server/trainer/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/torch_status.h"
#include "server/model/hf_config.h"
#include "server/model/safetensors.h"
#include "server/trainer/corpus.h"

namespace attnserve::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Windows of seq_len + 1 bytes -> (inputs, targets), each (B, T) int64.
std::pair<at::Tensor, at::Tensor> Windows(const std::string& text,
                                          const std::vector<int64_t>& starts, int seq_len) {
  at::Tensor buf = at::empty({int64_t(starts.size()), seq_len + 1}, at::kLong);
  int64_t* p = buf.data_ptr<int64_t>();
  for (size_t b = 0; b < starts.size(); ++b) {
    for (int i = 0; i <= seq_len; ++i) {
      p[b * (seq_len + 1) + i] = static_cast<unsigned char>(text[starts[b] + i]);
    }
  }
  return {buf.narrow(1, 0, seq_len), buf.narrow(1, 1, seq_len)};
}

// Mean next-byte cross-entropy of logits (B, T, V) against targets (B, T).
at::Tensor Loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

double LearningRate(const TrainOptions& o, int step) {
  if (step < o.warmup) return o.lr * (step + 1) / o.warmup;
  const double progress = double(step - o.warmup) / std::max(1, o.steps - o.warmup);
  const double cosine = 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress)));
  return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * cosine);
}

// Matrices decay; gains (1-D) and scalars do not.
bool Decays(const at::Tensor& p) { return p.dim() >= 2; }

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  return f ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

// Copies the tensors named `prefix` + name from `saved` into `dst` (same order as
// `params`); InvalidArgument naming the first tensor that is missing or of another shape.
absl::Status CopyFromCheckpoint(const std::unordered_map<std::string, at::Tensor>& saved,
                                const attention::NamedTensors& params,
                                const std::string& prefix, std::vector<at::Tensor>& dst,
                                const std::string& path) {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = saved.find(prefix + params[i].first);
    if (it == saved.end() || it->second.sizes() != dst[i].sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " does not fit this config (tensor '", prefix, params[i].first, "')"));
    }
    dst[i].copy_(it->second);
  }
  return absl::OkStatus();
}

// The tensors of a trainer checkpoint (safetensors with internal names: the parameters,
// "adam_m." and "adam_v." + each, "step") by name.
absl::StatusOr<std::unordered_map<std::string, at::Tensor>> ReadCheckpoint(
    const std::string& path) {
  auto reader = model::SafetensorsReader::OpenFile(path);
  if (!reader.ok()) return reader.status();
  std::unordered_map<std::string, at::Tensor> out;
  for (const model::SafetensorsEntry& e : (*reader)->tensors()) {
    auto values = model::ToFloat32(e);
    if (!values.ok()) return values.status();
    at::Tensor t = at::empty(e.shape, at::kFloat);
    if (!values->empty()) std::memcpy(t.data_ptr(), values->data(), values->size() * 4);
    out.emplace(e.name, t);
  }
  return out;
}

// Writes `tensors` (fp32) as a checkpoint ReadCheckpoint reads.
absl::Status WriteCheckpoint(const std::string& path, const attention::NamedTensors& tensors) {
  std::vector<at::Tensor> kept;  // contiguous fp32, alive until written
  std::vector<model::SafetensorsTensor> views;
  for (const auto& [name, t] : tensors) {
    kept.push_back(t.detach().to(at::kFloat).contiguous());
    views.push_back({name, kept.back().sizes().vec(), kept.back().data_ptr<float>()});
  }
  return model::WriteSafetensors(path, views, model::SafetensorsDtype::kF32);
}

// Copies `saved` (by name) into `params`; errors as CopyFromCheckpoint.
absl::Status CopyByName(const std::unordered_map<std::string, at::Tensor>& saved,
                        const attention::NamedTensors& params, const std::string& source) {
  std::vector<at::Tensor> dst;
  for (auto& [name, p] : params) dst.push_back(p);
  return CopyFromCheckpoint(saved, params, "", dst, source);
}

// The parameters of the model directory `dir` (Model::Load) by internal name.
absl::StatusOr<std::unordered_map<std::string, at::Tensor>> ReadModelDir(const std::string& dir) {
  model::LoadOptions load;
  load.dequantize = true;  // every weight a trainable fp32 tensor
  auto model = model::Model::Load(dir, load);
  if (!model.ok()) return model.status();
  std::unordered_map<std::string, at::Tensor> out;
  for (auto& [name, t] : (*model)->NamedParameters()) out.emplace(name, t);
  return out;
}

// (seq_len, batch) of training step `step` under the curriculum.
std::pair<int, int> WindowsOfStep(const TrainOptions& o, int step) {
  if (o.short_seq_len > 0 && step < o.short_steps) {
    return {o.short_seq_len, std::max(1, o.batch * o.seq_len / o.short_seq_len)};
  }
  return {o.seq_len, o.batch};
}

}  // namespace

absl::StatusOr<std::unique_ptr<model::Model>> LoadCheckpoint(const model::ModelConfig& config,
                                                             const std::string& path) {
  auto created = model::Model::Create(config, /*seed=*/1);
  if (!created.ok()) return created.status();
  std::unique_ptr<model::Model> model = std::move(created).value();
  absl::Status s = CatchTorch("loading a checkpoint", [&]() -> absl::Status {
    auto saved = ReadCheckpoint(path);
    if (!saved.ok()) return saved.status();
    return CopyByName(*saved, model->NamedParameters(), path);
  });
  if (!s.ok()) return s;
  return model;
}

double Evaluate(const model::Model& model, const std::string& text, int seq_len,
                int batches, int batch) {
  c10::NoGradGuard no_grad;
  const int64_t windows = int64_t(batches) * batch;
  const int64_t span = int64_t(text.size()) - seq_len - 1;
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    std::vector<int64_t> starts;
    for (int b = 0; b < batch; ++b) starts.push_back(span * (int64_t(i) * batch + b) / windows);
    auto [x, y] = Windows(text, starts, seq_len);
    total += Loss(model.Forward(x), y).item<double>();
  }
  return total / batches;
}

absl::Status Train(const model::ModelConfig& config, const TrainOptions& o,
                   const std::function<void(const Progress&)>& on_progress) {
  if (o.steps < 1 || o.batch < 1 || o.seq_len < 2 || o.warmup < 1 || !(o.lr > 0)) {
    return absl::InvalidArgumentError(
        "steps, batch and warmup must be >= 1, seq_len >= 2 and lr > 0");
  }
  if (o.short_seq_len < 0 || o.short_steps < 0 ||
      (o.short_seq_len > 0 && (o.short_seq_len < 2 || o.short_seq_len > o.seq_len))) {
    return absl::InvalidArgumentError(
        "short_seq_len must be 0 (no curriculum) or in [2, seq_len], short_steps >= 0");
  }
  auto corpus = LoadCorpus(o.corpus_path, int64_t(o.seq_len) + 1);
  if (!corpus.ok()) return corpus.status();
  // The trainer reads bytes: its models carry the byte tokenizer's class.
  model::ModelConfig byte_config = config;
  if (byte_config.tokenizer_class.empty()) byte_config.tokenizer_class = model::kByteTokenizerClass;
  auto created = model::Model::Create(byte_config, o.seed);
  if (!created.ok()) return created.status();
  std::unique_ptr<model::Model> model = std::move(created).value();
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", o.out_dir, ": ", ec.message()));
  if (absl::Status s = WriteText(o.out_dir + "/" + model::kHfConfigFile,
                                 model::HfConfigToJson(model->config()));
      !s.ok()) {
    return s;
  }
  at::set_num_threads(std::max(1, o.threads));

  return CatchTorch("training", [&]() -> absl::Status {
    attention::NamedTensors params = model->NamedParameters();
    std::vector<at::Tensor> m, v;
    for (auto& [name, p] : params) {
      p.requires_grad_(true);
      m.push_back(at::zeros_like(p));
      v.push_back(at::zeros_like(p));
    }
    const std::string checkpoint = o.out_dir + "/" + kCheckpointFile;
    const std::string log_path = o.out_dir + "/train_log.csv";
    int start = 0;
    if (o.resume && std::filesystem::exists(checkpoint)) {
      auto saved = ReadCheckpoint(checkpoint);
      if (!saved.ok()) return saved.status();
      const std::unordered_map<std::string, at::Tensor>& byname = *saved;
      std::vector<at::Tensor> weights;
      for (auto& [name, p] : params) weights.push_back(p);
      for (auto [prefix, dst] : {std::pair<std::string, std::vector<at::Tensor>*>{"", &weights},
                                 {"adam_m.", &m}, {"adam_v.", &v}}) {
        if (absl::Status s = CopyFromCheckpoint(byname, params, prefix, *dst, checkpoint);
            !s.ok()) {
          return s;
        }
      }
      start = int(byname.at("step").item<double>());
    } else {
      if (!o.init_from.empty()) {
        auto init = ReadModelDir(o.init_from);
        if (!init.ok()) return init.status();
        if (absl::Status s = CopyByName(*init, params, o.init_from); !s.ok()) return s;
      }
      std::ofstream(log_path, std::ios::trunc) << "step,train_loss,val_loss,val_bpb\n";
    }
    if (absl::Status s = WriteText(o.out_dir + "/train_command.txt",
                                   absl::StrCat(o.command, "\nseed ", o.seed, "\n"));
        !s.ok()) {
      return s;
    }
    std::ofstream log(log_path, std::ios::app);
    auto started = Clock::now();
    int phase_start = start;  // first step run at the current window length
    double recent_loss = 0;
    const int end = o.stop_after > 0 ? std::min(o.stop_after, o.steps) : o.steps;
    for (int step = start; step < end; ++step) {
      const auto [seq_len, batch] = WindowsOfStep(o, step);
      if (step > start && seq_len != WindowsOfStep(o, step - 1).first) {
        started = Clock::now();
        phase_start = step;
      }
      // The batch is a function of (seed, step) alone, so a resumed run sees the same data.
      const int64_t span = int64_t(corpus->train.size()) - seq_len - 1;
      std::mt19937_64 rng(o.seed * 1000003ULL + uint64_t(step));
      std::vector<int64_t> starts;
      for (int b = 0; b < batch; ++b) starts.push_back(int64_t(rng() % uint64_t(span)));
      auto [x, y] = Windows(corpus->train, starts, seq_len);
      at::Tensor loss = Loss(model->Forward(x), y);
      loss.backward();
      const double lr = LearningRate(o, step);
      {
        c10::NoGradGuard no_grad;
        double norm2 = 0;
        for (auto& [name, p] : params) norm2 += p.grad().pow(2).sum().item<double>();
        const double scale = std::min(1.0, o.clip / (std::sqrt(norm2) + 1e-6));
        const double c1 = 1 - std::pow(o.beta1, step + 1), c2 = 1 - std::pow(o.beta2, step + 1);
        for (size_t i = 0; i < params.size(); ++i) {
          at::Tensor& p = params[i].second;
          at::Tensor g = p.grad() * scale;
          m[i].mul_(o.beta1).add_(g, 1 - o.beta1);
          v[i].mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
          if (Decays(p)) p.mul_(1 - lr * o.weight_decay);
          p.addcdiv_(m[i] / c1, (v[i] / c2).sqrt_().add_(o.eps), -lr);
          p.mutable_grad().zero_();
        }
      }
      const double train_loss = loss.item<double>();
      recent_loss = step == start ? train_loss : 0.9 * recent_loss + 0.1 * train_loss;
      const bool last = step + 1 == end;
      Progress pr;
      pr.step = step + 1;
      pr.steps = o.steps;
      pr.train_loss = recent_loss;
      pr.seq_len = seq_len;
      const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
      pr.tokens_per_second = double(step + 1 - phase_start) * batch * seq_len / elapsed;
      pr.eta_seconds = elapsed / (step + 1 - phase_start) * (o.steps - step - 1);
      if ((step + 1) % o.eval_every == 0 || last) {
        pr.val_loss = Evaluate(*model, corpus->validation, o.seq_len, o.eval_batches, o.batch);
        log << absl::StrFormat("%d,%.5f,%.5f,%.5f\n", step + 1, recent_loss, pr.val_loss,
                               pr.val_loss / std::log(2.0))
            << std::flush;
      }
      if ((step + 1) % o.checkpoint_every == 0 || last) {
        attention::NamedTensors state;
        for (size_t i = 0; i < params.size(); ++i) {
          state.emplace_back(params[i].first, params[i].second);
          state.emplace_back("adam_m." + params[i].first, m[i]);
          state.emplace_back("adam_v." + params[i].first, v[i]);
        }
        state.emplace_back("step", at::full({1}, double(step + 1), at::kFloat));
        if (absl::Status s = WriteCheckpoint(checkpoint, state); !s.ok()) return s;
      }
      if (on_progress) on_progress(pr);
    }
    if (end < o.steps) return absl::OkStatus();  // stopped early: the checkpoint is the state
    for (auto& [name, p] : params) p.requires_grad_(false);
    if (absl::Status s = model->Save(o.out_dir); !s.ok()) return s;
    const double val = Evaluate(*model, corpus->validation, o.seq_len, o.eval_batches, o.batch);
    std::string report = absl::StrFormat(
        "val_loss %.5f\nval_bpb %.5f\nsteps %d\nbatch %d\nseq_len %d\neval_batches %d\n"
        "corpus %s\n",
        val, val / std::log(2.0), o.steps, o.batch, o.seq_len, o.eval_batches, o.corpus_path);
    if (!o.init_from.empty()) absl::StrAppendFormat(&report, "init_from %s\n", o.init_from);
    if (o.short_seq_len > 0 && o.short_steps > 0) {
      absl::StrAppendFormat(&report, "short_seq_len %d\nshort_steps %d\n", o.short_seq_len,
                            o.short_steps);
    }
    return WriteText(o.out_dir + "/report.txt", report);
  });
}

}  // namespace attnserve::trainer
