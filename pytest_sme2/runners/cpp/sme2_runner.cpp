// pytest-sme2's ExecuTorch runner: one small program, built by `pytest-sme2 build-runner` against the
// installed executorch wheel (its headers and shared libraries), for this host or cross-built for aarch64.
//
// It speaks executor_runner's command line (--model_path, --num_executions, --etdump_path, --cpu_threads,
// --inputs, --output_file), so every path of pytest-sme2 that takes a user's executor_runner takes this one.
// One binary gives both run kinds of the two-run principle: without --etdump_path no event tracer is attached
// (a timing-only process: nothing but the clock around each execute()); with it, an ETDumpGen records the
// per-operator trace. Besides executor_runner's log lines it prints, prefixed "sme2_runner ", facts pytest-sme2
// reads: planned memory, load time, resident memory at start and at its peak (VmHWM), and the memory map of the executorch libraries (to map an
// emulator's executed addresses to the wheel's exported kernels). --probe prints the CPU's hwcaps as the
// process sees them (under QEMU: the emulated CPU's) and exits.

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

// The wheel ships libexecutorch_threadpool.so but not extension/threadpool/threadpool.h: declare the two
// calls we make, exactly as the library exports them.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
  size_t get_thread_count() const;
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace {

using executorch::aten::ScalarType;
using executorch::extension::FileDataLoader;
using executorch::extension::MallocMemoryAllocator;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Span;

struct Options {
  std::string model_path = "model.pte";
  std::string etdump_path;  // empty: no tracer (timing-only run)
  std::string inputs;       // comma-separated raw tensor files, one per input; empty: all ones
  std::string output_file;  // outputs of the last execution, for numerics checks
  std::string method_name;  // empty: the program's first method
  uint32_t num_executions = 1;
  long cpu_threads = -1;  // -1: the thread pool's default (one thread per performant core)
  bool probe = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "ERROR: %s\n", message.c_str());
  std::exit(1);
}

const char* usage() {
  return "usage: sme2_runner --model_path FILE [--num_executions N] [--etdump_path FILE] [--cpu_threads T]\n"
         "                   [--inputs F1,F2,...] [--output_file FILE] [--method_name NAME] | --probe\n";
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage(), stdout);
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) fail("unexpected argument '" + arg + "'\n" + usage());
    std::string name = arg.substr(2), value;
    bool has_value = false;
    const auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "probe") {
      o.probe = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) fail("flag '--" + name + "' needs a value");
      value = argv[++i];
    }
    try {
      if (name == "model_path") o.model_path = value;
      else if (name == "etdump_path") o.etdump_path = value;
      else if (name == "inputs") o.inputs = value;
      else if (name == "output_file") o.output_file = value;
      else if (name == "method_name") o.method_name = value;
      else if (name == "num_executions") o.num_executions = static_cast<uint32_t>(std::stoul(value));
      else if (name == "cpu_threads") o.cpu_threads = std::stol(value);
      else if (name == "print_output") continue;  // accepted for executor_runner compatibility
      else fail("unknown command line flag '" + name + "'\n" + usage());
    } catch (const std::logic_error&) {
      fail("flag '--" + name + "' has a bad value '" + value + "'");
    }
  }
  if (o.num_executions < 1) fail("--num_executions must be at least 1");
  return o;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void print_probe() {
  unsigned long hwcap = 0, hwcap2 = 0;
  long sve_vl = -1, sme_vl = -1;
#if defined(__linux__)
  hwcap = getauxval(AT_HWCAP);
  hwcap2 = getauxval(AT_HWCAP2);
#if defined(__aarch64__)
  // PR_SVE_GET_VL (51) and PR_SME_GET_VL (64) return the vector length in bytes in the low 16 bits.
  const long sve = prctl(51, 0, 0, 0, 0);
  const long sme = prctl(64, 0, 0, 0, 0);
  if (sve >= 0) sve_vl = sve & 0xffff;
  if (sme >= 0) sme_vl = sme & 0xffff;
#endif
#endif
#if defined(__aarch64__)
  const char* arch = "aarch64";
#elif defined(__x86_64__)
  const char* arch = "x86_64";
#else
  const char* arch = "unknown";
#endif
  std::printf("sme2_runner probe: arch=%s hwcap=0x%lx hwcap2=0x%lx sve_vl_bytes=%ld sme_vl_bytes=%ld\n", arch,
              hwcap, hwcap2, sve_vl, sme_vl);
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::printf("sme2_runner cpuinfo-begin\n");
  std::string line;
  while (std::getline(cpuinfo, line)) std::printf("%s\n", line.c_str());
  std::printf("sme2_runner cpuinfo-end\n");
}

// The memory map of this binary and the executorch libraries: with it, an emulator's log of executed
// addresses maps to the libraries' exported symbols.
void print_maps() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libexecutorch") != std::string::npos || line.find("sme2_runner") != std::string::npos) {
      std::fprintf(stderr, "sme2_runner map: %s\n", line.c_str());
    }
  }
}

// Every executable file-backed mapping (libc, libstdc++, the loader too): an instruction counter attributes each
// executed address to its library with these.
void print_code_maps() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    if (perms.size() > 2 && perms[2] == 'x' && !path.empty() && path[0] == '/') {
      std::fprintf(stderr, "sme2_runner code-map: %s\n", line.c_str());
    }
  }
}

void fill_ones(void* data, size_t nbytes, ScalarType type) {
  switch (type) {
    case ScalarType::Float: {
      auto* p = static_cast<float*>(data);
      for (size_t i = 0; i < nbytes / sizeof(float); ++i) p[i] = 1.0f;
      break;
    }
    case ScalarType::Double: {
      auto* p = static_cast<double*>(data);
      for (size_t i = 0; i < nbytes / sizeof(double); ++i) p[i] = 1.0;
      break;
    }
    case ScalarType::Half:
    case ScalarType::BFloat16: {
      const uint16_t one = type == ScalarType::Half ? 0x3C00 : 0x3F80;
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < nbytes / 2; ++i) p[i] = one;
      break;
    }
    case ScalarType::Long: {
      auto* p = static_cast<int64_t*>(data);
      for (size_t i = 0; i < nbytes / 8; ++i) p[i] = 1;
      break;
    }
    case ScalarType::Int: {
      auto* p = static_cast<int32_t*>(data);
      for (size_t i = 0; i < nbytes / 4; ++i) p[i] = 1;
      break;
    }
    default:
      std::memset(data, 1, nbytes);  // Bool, Byte, Char: one byte each
  }
}

void write_outputs(Method& method, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("cannot write --output_file " + path);
  const size_t n = method.outputs_size();
  out << "sme2_outputs 1 " << n << "\n";
  for (size_t i = 0; i < n; ++i) {
    const EValue& value = method.get_output(i);
    if (!value.isTensor()) {
      out << "other " << i << "\n";
      continue;
    }
    const auto tensor = value.toTensor();
    out << "tensor " << i << " " << static_cast<int>(tensor.scalar_type()) << " " << tensor.nbytes() << " ";
    for (ssize_t d = 0; d < tensor.dim(); ++d) out << (d ? "x" : "") << tensor.size(d);
    out << "\n";
    out.write(static_cast<const char*>(tensor.const_data_ptr()), static_cast<std::streamsize>(tensor.nbytes()));
    out << "\n";
  }
  if (!out) fail("writing --output_file " + path + " failed");
}

}  // namespace

// The markers around each method execution: under QEMU's -d exec log the blocks at these functions carry their
// names, and an instruction counter counts what executes between them (not start-up, not input copies). extern "C",
// not inlined, and with a memory clobber, so each stays a real call that no code moves across.
extern "C" __attribute__((noinline, used)) void sme2_runner_count_begin() { asm volatile("" ::: "memory"); }
extern "C" __attribute__((noinline, used)) void sme2_runner_count_end() { asm volatile("" ::: "memory"); }

// A "VmHWM:"/"VmRSS:" value of this process from /proc/self/status, in kB (-1 without one). The peak is read
// there, not from getrusage: Linux carries the high-water mark of the process that exec'd us into ru_maxrss, so
// a runner started by a 400 MB Python process reports 400 MB there. Under qemu-user this is the emulator's process.
static long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  const std::string prefix = std::string(key) + ":";
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) == 0) return std::strtol(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  if (opt.probe) {
    print_probe();
    return 0;
  }
  executorch::runtime::runtime_init();

  if (opt.cpu_threads > 0) {
    auto* pool = executorch::extension::threadpool::get_threadpool();
    if (pool == nullptr) fail("no thread pool in this executorch build; --cpu_threads cannot be honoured");
    pool->_unsafe_reset_threadpool(static_cast<uint32_t>(opt.cpu_threads));
  }
  // Resident memory before the program is opened: the runner and its libraries, no model yet.
  std::fprintf(stderr, "sme2_runner rss_start_kb: %ld\n", status_kb("VmRSS"));
  const auto load_start = std::chrono::steady_clock::now();
  auto loader = FileDataLoader::from(opt.model_path.c_str());
  if (!loader.ok()) fail("cannot open --model_path " + opt.model_path + " (error 0x" +
                         std::to_string(static_cast<int>(loader.error())) + ")");
  auto program = Program::load(&loader.get());
  if (!program.ok()) fail("cannot load program " + opt.model_path + ": not a .pte this executorch can read (error " +
                          std::to_string(static_cast<int>(program.error())) + ")");
  std::string method_name = opt.method_name;
  if (method_name.empty()) {
    auto first = program->get_method_name(0);
    if (!first.ok()) fail("program " + opt.model_path + " has no method");
    method_name = *first;
  }
  auto meta = program->method_meta(method_name.c_str());
  if (!meta.ok()) fail("program has no method '" + method_name + "'");

  // Memory planned at export time: one buffer per planned id, sized exactly as the program says.
  std::vector<std::unique_ptr<uint8_t[]>> planned_buffers;
  std::vector<Span<uint8_t>> planned_spans;
  size_t planned_total = 0;
  std::string planned_sizes;
  for (size_t id = 0; id < meta->num_memory_planned_buffers(); ++id) {
    const size_t size = static_cast<size_t>(meta->memory_planned_buffer_size(id).get());
    planned_buffers.emplace_back(new uint8_t[size]);
    planned_spans.emplace_back(planned_buffers.back().get(), size);
    planned_total += size;
    planned_sizes += (id ? "," : "") + std::to_string(size);
  }
  HierarchicalAllocator planned_memory({planned_spans.data(), planned_spans.size()});
  MallocMemoryAllocator method_allocator;
  MallocMemoryAllocator temp_allocator;
  MemoryManager memory_manager(&method_allocator, &planned_memory, &temp_allocator);

  std::unique_ptr<executorch::etdump::ETDumpGen> tracer;
  if (!opt.etdump_path.empty()) tracer = std::make_unique<executorch::etdump::ETDumpGen>();
  auto method = program->load_method(method_name.c_str(), &memory_manager, tracer.get());
  if (!method.ok()) fail("loading method '" + method_name + "' failed (error " +
                         std::to_string(static_cast<int>(method.error())) +
                         "): an operator or backend the program needs is not in this runner's libraries");
  const double load_ms = ms_since(load_start);
  std::fprintf(stderr, "Model file %s is loaded.\nUsing method %s\nModel loaded in %f ms.\n", opt.model_path.c_str(),
               method_name.c_str(), load_ms);
  std::fprintf(stderr, "sme2_runner planned_memory: buffers=%zu total_bytes=%zu sizes=%s\n",
               planned_spans.size(), planned_total, planned_sizes.c_str());
  print_maps();
  print_code_maps();

  // Inputs: raw files (as executor_runner --inputs takes them), else ones; kept alive for every execution.
  const std::vector<std::string> files = split(opt.inputs, ',');
  if (!files.empty() && files.size() != meta->num_inputs()) {
    fail("--inputs names " + std::to_string(files.size()) + " files, the method takes " +
         std::to_string(meta->num_inputs()) + " inputs");
  }
  std::vector<std::vector<uint8_t>> input_data(meta->num_inputs());
  std::vector<executorch::extension::TensorPtr> input_tensors;
  for (size_t i = 0; i < meta->num_inputs(); ++i) {
    auto info = meta->input_tensor_meta(i);
    if (!info.ok()) fail("input " + std::to_string(i) + " is not a tensor; this runner feeds tensors only");
    input_data[i].resize(info->nbytes());
    if (!files.empty()) {
      std::ifstream in(files[i], std::ios::binary | std::ios::ate);
      if (!in) fail("cannot read input file " + files[i]);
      const auto size = static_cast<size_t>(in.tellg());
      if (size != info->nbytes()) {
        fail("input file " + files[i] + " has " + std::to_string(size) + " bytes, input " + std::to_string(i) +
             " needs " + std::to_string(info->nbytes()));
      }
      in.seekg(0);
      in.read(reinterpret_cast<char*>(input_data[i].data()), static_cast<std::streamsize>(size));
    } else {
      fill_ones(input_data[i].data(), input_data[i].size(), info->scalar_type());
    }
    const auto sizes_span = info->sizes();
    const auto order_span = info->dim_order();
    std::vector<executorch::aten::SizesType> sizes(sizes_span.begin(), sizes_span.end());
    std::vector<executorch::aten::DimOrderType> dim_order(order_span.begin(), order_span.end());
    input_tensors.push_back(executorch::extension::make_tensor_ptr(
        std::move(sizes), input_data[i].data(), std::move(dim_order), {}, info->scalar_type()));
  }

  double total_ms = 0.0;
  for (uint32_t i = 0; i < opt.num_executions; ++i) {
    // Memory planning gives a planned input's slot to intermediates once it is consumed, so every execution
    // gets its inputs again (a copy, outside the timed span), as the Python runtime's execute(inputs) does.
    for (size_t k = 0; k < input_tensors.size(); ++k) {
      const Error set = method->set_input(EValue(*input_tensors[k]), k);
      if (set != Error::Ok) fail("setting input " + std::to_string(k) + " failed (error " +
                                 std::to_string(static_cast<int>(set)) + ")");
    }
    const auto start = std::chrono::steady_clock::now();
    sme2_runner_count_begin();
    const Error status = method->execute();
    sme2_runner_count_end();
    const double ms = ms_since(start);
    if (status != Error::Ok) fail("execution " + std::to_string(i + 1) + " failed (error " +
                                  std::to_string(static_cast<int>(status)) + ")");
    total_ms += ms;
    std::fprintf(stderr, "Iteration %u of %u: %f ms\n", i + 1, opt.num_executions, ms);
  }
  std::fprintf(stderr, "Model executed successfully %u time(s) in %f ms.\n", opt.num_executions, total_ms);
  if (!opt.output_file.empty()) write_outputs(*method, opt.output_file);

  if (tracer) {
    const auto result = tracer->get_etdump_data();
    if (result.buf == nullptr || result.size == 0) {
      fail("the event tracer recorded nothing: these executorch libraries were built without "
           "EXECUTORCH_ENABLE_EVENT_TRACER");
    }
    std::ofstream out(opt.etdump_path, std::ios::binary);
    out.write(static_cast<const char*>(result.buf), static_cast<std::streamsize>(result.size));
    std::free(result.buf);
    if (!out) fail("cannot write --etdump_path " + opt.etdump_path);
    std::fprintf(stderr, "ETDump written to file '%s'.\n", opt.etdump_path.c_str());
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::fprintf(stderr, "sme2_runner peak_rss_kb: %ld\n", usage.ru_maxrss);
  std::fprintf(stderr, "sme2_runner vmhwm_kb: %ld\n", status_kb("VmHWM"));
  return 0;
}
