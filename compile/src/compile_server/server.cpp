// elfjit's compile server: a warm clang. It compiles one request after another, each
// exactly as `clang ARGS` would with the source on stdin and the object on stdout, in
// this one process, so a kernel costs clang's own work and not clang's start.
//
// The protocol (frames, magic numbers, caps, exit statuses) is defined once, in
// compile/src/compile_server/protocol.rs; every ELFJIT_CS_* macro used here is passed
// from there with -D when elfjit builds this file. Usage: SERVER PARENT_PID (elfjit puts
// its memory limit on it from outside, as on a spawned clang).
//
// Why the results equal a spawned clang's:
// - the driver-level arguments go through clang's own Driver, as clang's main() does
//   (the executable's real path decides the resource directory; the name it was called
//   by decides the diagnostics' prefix and any target/mode prefix), and the single cc1
//   job it plans is run as cc1_main() runs it; a request that repeats an earlier one's
//   arguments, executable and directory, whose plan said nothing, gets a copy of that
//   plan's parsed invocation instead (the same parse, made once);
// - the source is what clang reads from "-" and the object what it writes to "-": a
//   memfd put on descriptor 0, and another on descriptor 1, for the request (the
//   protocol itself uses copies of the original descriptors), so clang names, records
//   and writes them exactly as it does stdin and stdout, for C and for IR;
// - diagnostics go through the TextDiagnosticPrinter clang would use, into memory.
// What would change this process's global state (-mllvm, plugins) or is not one object
// from stdin is refused with KIND_NEEDS_SPAWN: the caller spawns clang for it.

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticFrontend.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Driver/Compilation.h>
#include <clang/Driver/Driver.h>
#include <clang/Driver/Job.h>
#include <clang/Driver/Tool.h>
#include <clang/Driver/ToolChain.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticBuffer.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Frontend/Utils.h>
#include <clang/FrontendTool/Utils.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/Path.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <typeinfo>
#include <string>
#include <vector>

#ifndef ELFJIT_CS_REQUEST_MAGIC
#error "built without the protocol's definitions (elfjit passes them with -D)"
#endif

namespace {

// The process that started the server (elfjit).
pid_t parent = 0;

// The protocol's descriptors (copies of the original stdin and stdout).
int proto_in = -1;
int proto_out = -1;

[[noreturn]] void fail(int status, const char *what, const char *detail) {
  fprintf(stderr, "elfjit-compile-server: %s%s%s\n", what, detail ? ": " : "",
          detail ? detail : "");
  _exit(status);
}

// Reads exactly `len` bytes. Returns the bytes read before the end of input (len when
// complete); an error ends the server.
size_t read_fully(void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = read(proto_in, static_cast<char *>(buf) + done, len - done);
    if (n == 0)
      return done;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fail(ELFJIT_CS_EXIT_IO, "cannot read a request", strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return done;
}

void write_fully(const void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(proto_out, static_cast<const char *>(buf) + done, len - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fail(ELFJIT_CS_EXIT_IO, "cannot write a reply", strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
}

uint32_t u32_at(const unsigned char *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t u64_at(const unsigned char *p) { return uint64_t(u32_at(p)) | uint64_t(u32_at(p + 4)) << 32; }
void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put64(unsigned char *p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v));
  put32(p + 4, static_cast<uint32_t>(v >> 32));
}

struct Reply {
  uint32_t kind = ELFJIT_CS_KIND_COMPILED;
  int32_t status = 0;
  std::string object;
  bool object_too_large = false;
  std::string diagnostics;
  bool has_dependencies = false;
  std::string dependencies;
};

uint64_t monotonic_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

// When the request being served was read in full: the reply carries the server's time
// from then, so that the client can tell the protocol's overhead from the compile.
uint64_t request_read_ns = 0;

void send_reply(const Reply &r) {
  unsigned char h[ELFJIT_CS_REPLY_HEADER_SIZE] = {0};
  put32(h, ELFJIT_CS_REPLY_MAGIC);
  put32(h + 4, r.kind);
  put32(h + 8, static_cast<uint32_t>(r.status));
  put32(h + 12, r.has_dependencies ? ELFJIT_CS_REPLY_FLAG_HAS_DEPENDENCIES : 0);
  put64(h + 16, r.object.size());
  put64(h + 24, r.diagnostics.size());
  put64(h + 32, r.dependencies.size());
  put64(h + 40, monotonic_ns() - request_read_ns);
  // One writev for the whole reply: the client wakes once for a small one.
  struct iovec parts[4] = {
      {h, sizeof h},
      {const_cast<char *>(r.object.data()), r.object.size()},
      {const_cast<char *>(r.diagnostics.data()), r.diagnostics.size()},
      {const_cast<char *>(r.dependencies.data()), r.dependencies.size()},
  };
  struct iovec *next = parts;
  int left = 4;
  while (left > 0) {
    if (next->iov_len == 0) {
      next++;
      left--;
      continue;
    }
    ssize_t n = writev(proto_out, next, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fail(ELFJIT_CS_EXIT_IO, "cannot write a reply", strerror(errno));
    }
    size_t done = static_cast<size_t>(n);
    while (left > 0 && done >= next->iov_len) {
      done -= next->iov_len;
      next++;
      left--;
    }
    if (left > 0) {
      next->iov_base = static_cast<char *>(next->iov_base) + done;
      next->iov_len -= done;
    }
  }
}

// Caps the reply's outputs: past a cap, only the head of the diagnostics is sent and the
// kind says which stream overflowed (what a spawned clang's reader reports).
void apply_caps(Reply &r) {
  int32_t stream = 0;
  if (r.object_too_large || r.object.size() > ELFJIT_CS_MAX_OBJECT_SIZE)
    stream = ELFJIT_CS_STREAM_OBJECT;
  else if (r.diagnostics.size() > ELFJIT_CS_MAX_DIAGNOSTICS)
    stream = ELFJIT_CS_STREAM_DIAGNOSTICS;
  else if (r.dependencies.size() > ELFJIT_CS_MAX_DEPENDENCY_LIST)
    stream = ELFJIT_CS_STREAM_DEPENDENCIES;
  if (stream == 0)
    return;
  r.kind = ELFJIT_CS_KIND_TOO_MUCH_OUTPUT;
  r.status = stream;
  r.object.clear();
  r.dependencies.clear();
  r.has_dependencies = false;
  if (r.diagnostics.size() > ELFJIT_CS_MAX_DIAGNOSTICS)
    r.diagnostics.resize(ELFJIT_CS_MAX_DIAGNOSTICS);
}

Reply needs_spawn(std::string why) {
  Reply r;
  r.kind = ELFJIT_CS_KIND_NEEDS_SPAWN;
  r.diagnostics = std::move(why);
  return r;
}

// The request being compiled, for the fatal-error handler: LLVM reports a backend error
// by calling it, and clang then exits with status 1 after printing the error; the
// server sends that as the reply, then exits (its state is not to be trusted).
std::string *current_diagnostics = nullptr;
clang::DiagnosticsEngine *current_engine = nullptr;

void on_fatal_error(void *, const char *message, bool) {
  if (current_engine)
    current_engine->Report(clang::diag::err_fe_error_backend) << message;
  Reply r;
  r.kind = ELFJIT_CS_KIND_COMPILED;
  r.status = 1;
  if (current_diagnostics)
    r.diagnostics = *current_diagnostics;
  apply_caps(r);
  send_reply(r);
  fail(ELFJIT_CS_EXIT_SETUP, "LLVM reported a fatal error; exiting after the reply", message);
}

// LLVM's command-line options are process-wide, and a back end may set one while it
// compiles (LLVM 19's PowerPC lowering sets the minimum jump-table size that every
// later compile, for any target, then uses). A spawned clang starts from the defaults
// every time; the server takes a snapshot of every scalar option once, before its first
// compile, and puts back any that changed before each request.
struct SavedOption {
  virtual ~SavedOption() = default;
  virtual void restore() = 0;
};

template <class T, bool External> struct SavedValue final : SavedOption {
  llvm::cl::opt<T, External> *option;
  T value;
  SavedValue(llvm::cl::opt<T, External> *o) : option(o), value(o->getValue()) {}
  void restore() override {
    if (!(option->getValue() == value))
      option->setValue(value);
  }
};

std::vector<std::unique_ptr<SavedOption>> saved_options;

// The most-derived type of an option, from its vtable (Itanium C++ ABI: the type_info
// pointer sits just before the first virtual function); null for a class compiled
// without RTTI, where dynamic_cast would crash. Options are `cl::opt<T>` exactly, so
// comparing the name is enough.
const std::type_info *type_of(llvm::cl::Option *o) {
  void **vtable = *reinterpret_cast<void ***>(o);
  return vtable ? static_cast<const std::type_info *>(vtable[-1]) : nullptr;
}

template <class T, bool External> bool save_as(llvm::cl::Option *o, const std::type_info *type) {
  if (strcmp(type->name(), typeid(llvm::cl::opt<T, External>).name()) != 0)
    return false;
  auto *typed = static_cast<llvm::cl::opt<T, External> *>(o);
  saved_options.push_back(std::make_unique<SavedValue<T, External>>(typed));
  return true;
}

void save_options() {
  for (auto &entry : llvm::cl::getRegisteredOptions(llvm::cl::SubCommand::getTopLevel())) {
    llvm::cl::Option *o = entry.second;
    const std::type_info *t = o ? type_of(o) : nullptr;
    if (!t)
      continue;
    save_as<bool, false>(o, t) || save_as<bool, true>(o, t) || save_as<unsigned, false>(o, t) ||
        save_as<unsigned, true>(o, t) || save_as<int, false>(o, t) ||
        save_as<int, true>(o, t) || save_as<unsigned long, false>(o, t) ||
        save_as<unsigned long long, false>(o, t) || save_as<float, false>(o, t) ||
        save_as<double, false>(o, t) || save_as<std::string, false>(o, t) ||
        save_as<llvm::cl::boolOrDefault, false>(o, t);
  }
}

void restore_options() {

  for (auto &saved : saved_options)
    saved->restore();
}

bool starts_with(const std::string &s, const char *prefix) { return s.rfind(prefix, 0) == 0; }

// Requests the server does not take: what changes LLVM's global options, and what makes
// clang print to its own stderr or files beside the object rather than diagnostics (a
// spawned clang's stderr holds both; the server's diagnostics only the latter).
bool refuses(const std::vector<std::string> &args, std::string &why) {
  for (const std::string &a : args) {
    if (a == "-mllvm" || starts_with(a, "-mllvm=")) {
      why = "-mllvm changes LLVM's global options, which a server shares between requests";
      return true;
    }
    if (a == "-v" || a == "--verbose" || a == "-###" || a == "-help" || a == "--help" ||
        a == "--version" || starts_with(a, "-print-") || starts_with(a, "--print-") ||
        starts_with(a, "-ftime-report") || starts_with(a, "-ftime-trace") ||
        a == "-save-stats" || starts_with(a, "-save-stats=")) {
      why = a + " makes clang print or write more than an object and diagnostics";
      return true;
    }
  }
  return false;
}

// Reads the whole of `fd` into `out`, unless it holds more than `cap` bytes: then
// returns false and reads nothing.
bool read_memfd(int fd, uint64_t cap, std::string &out) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    fail(ELFJIT_CS_EXIT_IO, "cannot read an output", strerror(errno));
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > cap)
    return false;
  out.resize(size);
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, &out[done], size - done, static_cast<off_t>(done));
    if (n <= 0) {
      if (n < 0 && errno == EINTR)
        continue;
      fail(ELFJIT_CS_EXIT_IO, "cannot read an output", n < 0 ? strerror(errno) : "short");
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

// Why the server does not run a parsed compile ("" when it does).
std::string refusal(clang::CompilerInstance &instance) {
  clang::FrontendOptions &frontend = instance.getFrontendOpts();
  if (!frontend.LLVMArgs.empty())
    return "the compile sets LLVM options (-mllvm), which a server shares between requests";
  if (!frontend.Plugins.empty() || !frontend.ActionName.empty() ||
      !frontend.AddPluginActions.empty() || !instance.getCodeGenOpts().PassPlugins.empty())
    return "the compile loads plugins, which would stay loaded in the server";
  if (frontend.ProgramAction != clang::frontend::EmitObj)
    return "the compile does not emit an object";
  if (frontend.Inputs.size() != 1 || frontend.Inputs[0].getFile() != "-")
    return "the compile does not read one source from stdin";
  if (frontend.OutputFile != "-")
    return "the compile does not write its object to stdout";
  return "";
}

// Parsed invocations by plan_key(), for requests that repeat one; at most MAX_PLANS
// (then the cache starts again empty).
constexpr size_t MAX_PLANS = 64;
std::map<std::string, std::unique_ptr<const clang::CompilerInvocation>> plans;

// Everything the driver's plan depends on that can differ between requests: the
// executable, the current directory and the driver's arguments (the environment and the
// installation on disk are the server's own, as for a clang spawned meanwhile).
std::string plan_key(const std::string &executable, const std::vector<const char *> &argv) {
  std::string key = executable;
  key.push_back('\0');
  llvm::SmallString<256> cwd;
  if (!llvm::sys::fs::current_path(cwd))
    key.append(cwd.begin(), cwd.end());
  for (const char *a : argv) {
    key.push_back('\0');
    key.append(a);
  }
  return key;
}

// What a compile leaves to free: its CompilerInstance (the AST, the preprocessor, the
// sources) and the stream its diagnostics printer writes to. Freed once the reply is
// sent, so that the client does not wait for the frees; always before the next request
// is read, so nothing of a request stays for the next.
struct Leftovers {
  std::string diagnostics;
  llvm::raw_string_ostream stream{diagnostics};
  std::unique_ptr<clang::CompilerInstance> instance;
};
std::unique_ptr<Leftovers> leftovers;

// Compiles one request with its source on stdin and stdout going to a memfd, as a
// spawned clang would see them.
Reply compile(std::vector<std::string> args, bool want_dependencies) {
  Reply reply;
  std::string why;
  if (refuses(args, why))
    return needs_spawn(why);
  // A spawned clang works in elfjit's current directory (relative -I paths, -g's
  // compilation directory): so does the request, whatever elfjit's directory is now.
  std::string cwd_link = "/proc/" + std::to_string(parent) + "/cwd";
  if (chdir(cwd_link.c_str()) != 0)
    return needs_spawn("cannot enter elfjit's current directory (" + cwd_link +
                       "): " + strerror(errno));

  int deps_fd = -1;
  if (want_dependencies) {
    deps_fd = memfd_create("elfjit-dependencies", MFD_CLOEXEC);
    if (deps_fd < 0)
      fail(ELFJIT_CS_EXIT_SETUP, "cannot create a memfd", strerror(errno));
    // What elfjit gives a spawned clang, with a path this process can open.
    args.push_back("-MD");
    args.push_back("-MT");
    args.push_back("x");
    args.push_back("-MF");
    args.push_back("/proc/self/fd/" + std::to_string(deps_fd));
  }
  std::vector<const char *> argv;
  for (const std::string &a : args)
    argv.push_back(a.c_str());

  // As clang's main(): the driver runs as the executable's real path, and is named (in
  // its diagnostics, and for a target or mode prefix) by what it was called.
  llvm::SmallString<256> real;
  std::string executable = args[0];
  if (!llvm::sys::fs::real_path(args[0], real))
    executable = std::string(real);
  std::string prog_name = std::string(llvm::sys::path::stem(args[0]));
  clang::driver::ParsedClangName target_and_mode =
      clang::driver::ToolChain::getTargetAndModeFromProgramName(args[0]);
  std::vector<const char *> driver_argv(argv);
  std::string target_prefix = target_and_mode.TargetPrefix;
  if (target_and_mode.DriverMode)
    driver_argv.insert(driver_argv.begin() + 1, target_and_mode.DriverMode);
  if (!target_prefix.empty() && target_and_mode.TargetIsValid) {
    const char *target_args[] = {"-target", target_prefix.c_str()};
    driver_argv.insert(driver_argv.begin() + 1, std::begin(target_args), std::end(target_args));
  }

  leftovers = std::make_unique<Leftovers>();
  std::string &diagnostics = leftovers->diagnostics;
  llvm::raw_string_ostream &diag_os = leftovers->stream;
  llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> diag_opts(
      clang::CreateAndPopulateDiagOpts(driver_argv).release());
  auto *driver_printer = new clang::TextDiagnosticPrinter(diag_os, &*diag_opts);
  driver_printer->setPrefix(prog_name);
  llvm::IntrusiveRefCntPtr<clang::DiagnosticIDs> diag_ids(new clang::DiagnosticIDs());
  clang::DiagnosticsEngine driver_diags(diag_ids, &*diag_opts, driver_printer);
  clang::ProcessWarningOptions(driver_diags, *diag_opts, /*ReportDiags=*/false);

  int status = 1;
  {
    // The driver's plan and its parse into an invocation depend only on the arguments,
    // the executable, the directory and what is installed: the second time a request
    // has all of those, the parse of the first is copied instead of made again.
    std::string key = plan_key(executable, driver_argv);
    auto planned = plans.find(key);
    std::unique_ptr<clang::CompilerInstance> &instance = leftovers->instance;
    instance = std::make_unique<clang::CompilerInstance>();
    auto *parse_buffer = new clang::TextDiagnosticBuffer;
    llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> parse_opts = new clang::DiagnosticOptions();
    clang::DiagnosticsEngine parse_diags(diag_ids, &*parse_opts, parse_buffer);
    bool parsed = true;
    std::unique_ptr<clang::driver::Driver> driver;
    std::unique_ptr<clang::driver::Compilation> compilation;
    if (planned != plans.end()) {
      instance->getInvocation() = *planned->second;
    } else {
      driver = std::make_unique<clang::driver::Driver>(
          executable, llvm::sys::getDefaultTargetTriple(), driver_diags);
      driver->setTargetAndMode(target_and_mode);
      compilation.reset(driver->BuildCompilation(driver_argv));
      if (!compilation || compilation->containsError() || driver_diags.hasErrorOccurred()) {
        driver_printer->finish();
        diag_os.flush();
        reply.diagnostics = diagnostics;
        reply.status = 1;
        if (deps_fd >= 0)
          close(deps_fd);
        apply_caps(reply);
        return reply;
      }
      const clang::driver::JobList &jobs = compilation->getJobs();
      if (jobs.size() != 1)
        why = "the driver plans " + std::to_string(jobs.size()) + " jobs, not one compile";
      const clang::driver::Command *job = jobs.empty() ? nullptr : &*jobs.begin();
      if (why.empty() && (job->getCreator().getName() != std::string("clang") ||
                          job->getArguments().empty() ||
                          job->getArguments()[0] != std::string("-cc1")))
        why = "the driver's job is not clang -cc1";
      if (!why.empty()) {
        if (deps_fd >= 0)
          close(deps_fd);
        return needs_spawn(why);
      }
      // As cc1_main(): parse with a buffer, then replay into the real printer.
      llvm::ArrayRef<const char *> cc1_args =
          llvm::ArrayRef<const char *>(job->getArguments()).slice(1);
      parsed = clang::CompilerInvocation::CreateFromArgs(instance->getInvocation(), cc1_args,
                                                         parse_diags, executable.c_str());
      // Only a plan that said nothing is kept: a copy replays no diagnostics.
      bool silent = diagnostics.empty() && driver_diags.getNumWarnings() == 0 &&
                    parse_buffer->err_begin() == parse_buffer->err_end() &&
                    parse_buffer->warn_begin() == parse_buffer->warn_end() &&
                    parse_buffer->remark_begin() == parse_buffer->remark_end() &&
                    parse_buffer->note_begin() == parse_buffer->note_end();
      if (parsed && silent && refusal(*instance).empty()) {
        if (plans.size() >= MAX_PLANS)
          plans.clear();
        plans.emplace(std::move(key), std::make_unique<clang::CompilerInvocation>(
                                          instance->getInvocation()));
      }
    }
    clang::FrontendOptions &frontend = instance->getFrontendOpts();
    if (parsed) {
      why = refusal(*instance);
      if (!why.empty()) {
        if (deps_fd >= 0)
          close(deps_fd);
        return needs_spawn(why);
      }
    }
    if (instance->getHeaderSearchOpts().UseBuiltinIncludes &&
        instance->getHeaderSearchOpts().ResourceDir.empty())
      instance->getHeaderSearchOpts().ResourceDir =
          clang::CompilerInvocation::GetResourcesPath(executable.c_str(), nullptr);
    instance->createDiagnostics(
        new clang::TextDiagnosticPrinter(diag_os, &instance->getDiagnosticOpts()), true);
    parse_buffer->FlushDiagnostics(instance->getDiagnostics());
    if (parsed) {
      // Everything of this request is freed before the next (the driver asks cc1 to
      // skip that, as its process is about to exit).
      frontend.DisableFree = false;
      instance->getCodeGenOpts().DisableFree = false;
      instance->setVerboseOutputStream(diag_os);
      current_diagnostics = &diagnostics;
      current_engine = &instance->getDiagnostics();
      bool ok = clang::ExecuteCompilerInvocation(instance.get());
      current_engine = nullptr;
      current_diagnostics = nullptr;
      status = ok ? 0 : 1;
    } else {
      instance->getDiagnosticClient().finish();
    }
    diag_os.flush();
  }
  driver_printer->finish();
  diag_os.flush();
  reply.diagnostics = diagnostics;
  reply.status = status;
  if (deps_fd >= 0) {
    if (!read_memfd(deps_fd, ELFJIT_CS_MAX_DEPENDENCY_LIST, reply.dependencies))
      reply.dependencies.assign(ELFJIT_CS_MAX_DEPENDENCY_LIST + 1, '\0');
    reply.has_dependencies = true;
    close(deps_fd);
  }
  apply_caps(reply);
  return reply;
}

// Reads one request and compiles it. Returns false at the end of input.
bool serve_one() {
  unsigned char h[ELFJIT_CS_REQUEST_HEADER_SIZE];
  size_t got = read_fully(h, sizeof h);
  if (got == 0)
    return false;
  if (got != sizeof h)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "the input ends inside a header");
  uint32_t magic = u32_at(h), flags = u32_at(h + 4), count = u32_at(h + 8), zero = u32_at(h + 12);
  uint64_t args_len = u64_at(h + 16), source_len = u64_at(h + 24);
  if (magic != ELFJIT_CS_REQUEST_MAGIC)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "wrong magic");
  if ((flags & ~uint32_t(ELFJIT_CS_FLAG_WANT_DEPENDENCIES)) != 0 || zero != 0)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "unknown flags");
  if (count == 0 || count > ELFJIT_CS_MAX_ARG_COUNT)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "argument count out of range");
  if (args_len > ELFJIT_CS_MAX_ARGS_BYTES || args_len < count)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "arguments' length out of range");
  if (source_len > ELFJIT_CS_MAX_SOURCE_SIZE)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "source larger than the cap");

  std::string packed(args_len, '\0');
  if (read_fully(&packed[0], args_len) != args_len)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "the input ends inside the arguments");
  if (packed.back() != '\0')
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "the last argument is not NUL-ended");
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < packed.size(); i++) {
    if (packed[i] == '\0') {
      args.emplace_back(packed, start, i - start);
      start = i + 1;
    }
  }
  if (args.size() != count)
    fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "argument count does not match");

  // The source goes into a memfd, in pieces: no buffer of the announced size is taken
  // before the bytes have arrived.
  int source_fd = memfd_create("elfjit-source", MFD_CLOEXEC);
  if (source_fd < 0)
    fail(ELFJIT_CS_EXIT_SETUP, "cannot create a memfd", strerror(errno));
  static char chunk[1 << 16];
  uint64_t left = source_len;
  while (left > 0) {
    size_t want = left < sizeof chunk ? static_cast<size_t>(left) : sizeof chunk;
    size_t n = read_fully(chunk, want);
    if (n != want)
      fail(ELFJIT_CS_EXIT_MALFORMED, "malformed request", "the input ends inside the source");
    size_t off = 0;
    while (off < n) {
      ssize_t w = write(source_fd, chunk + off, n - off);
      if (w < 0) {
        if (errno == EINTR)
          continue;
        fail(ELFJIT_CS_EXIT_SETUP, "cannot hold the source", strerror(errno));
      }
      off += static_cast<size_t>(w);
    }
    left -= n;
  }
  request_read_ns = monotonic_ns();
  if (lseek(source_fd, 0, SEEK_SET) != 0)
    fail(ELFJIT_CS_EXIT_SETUP, "cannot rewind the source", strerror(errno));
  int object_fd = memfd_create("elfjit-object", MFD_CLOEXEC);
  if (object_fd < 0)
    fail(ELFJIT_CS_EXIT_SETUP, "cannot create a memfd", strerror(errno));
  // While it compiles, the request's source is this process's stdin and its stdout is a
  // memfd: clang reads and writes them as it does when spawned on pipes.
  if (dup2(source_fd, 0) < 0 || dup2(object_fd, 1) < 0)
    fail(ELFJIT_CS_EXIT_SETUP, "cannot put the source on stdin", strerror(errno));
  Reply r = compile(std::move(args), (flags & ELFJIT_CS_FLAG_WANT_DEPENDENCIES) != 0);
  if (r.kind == ELFJIT_CS_KIND_COMPILED && !read_memfd(object_fd, ELFJIT_CS_MAX_OBJECT_SIZE, r.object))
    r.object_too_large = true;
  // Nothing of this request stays on stdin or stdout.
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0)
    fail(ELFJIT_CS_EXIT_SETUP, "cannot reset stdin and stdout", strerror(errno));
  close(null_fd);
  close(source_fd);
  close(object_fd);
  apply_caps(r);
  send_reply(r);
  // After the reply: the request's frees, and LLVM's options as they were at start.
  leftovers.reset();
  restore_options();
  return true;
}

// Ends the server when the process that started it is gone, even mid-compile (a
// parent-death signal would fire when the parent's *thread* that started it exits).
void *watch_parent(void *) {
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, parent, 0));
  if (pidfd >= 0 && getppid() == parent) {
    struct pollfd p = {pidfd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
  } else {
    while (getppid() == parent)
      usleep(100 * 1000);
  }
  _exit(ELFJIT_CS_EXIT_PARENT_GONE);
}

bool parse_u64(const char *s, unsigned long long &out) {
  if (!*s)
    return false;
  char *end = nullptr;
  errno = 0;
  out = strtoull(s, &end, 10);
  return errno == 0 && *end == '\0' && s[0] != '-';
}

} // namespace

int main(int argc, char **argv) {
  unsigned long long parent_pid = 0;
  if (argc != 2 || !parse_u64(argv[1], parent_pid) || parent_pid == 0 || parent_pid > INT32_MAX)
    fail(ELFJIT_CS_EXIT_SETUP, "usage", "elfjit-compile-server PARENT_PID");
  parent = static_cast<pid_t>(parent_pid);
  if (getppid() != parent)
    fail(ELFJIT_CS_EXIT_PARENT_GONE, "the parent is gone", nullptr);
  pthread_t watcher;
  if (pthread_create(&watcher, nullptr, watch_parent, nullptr) != 0)
    fail(ELFJIT_CS_EXIT_SETUP, "cannot start the parent watcher", nullptr);
  pthread_detach(watcher);

  // The protocol keeps the original descriptors; 0 and 1 become the compile's stdin
  // (a request's source) and a stdout nothing is written to.
  proto_in = fcntl(0, F_DUPFD_CLOEXEC, 3);
  proto_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (proto_in < 0 || proto_out < 0 || null_fd < 0 || dup2(null_fd, 0) < 0 ||
      dup2(null_fd, 1) < 0)
    fail(ELFJIT_CS_EXIT_SETUP, "cannot set up descriptors", strerror(errno));
  close(null_fd);

  llvm::InitializeAllTargets();
  llvm::InitializeAllTargetMCs();
  llvm::InitializeAllAsmPrinters();
  llvm::InitializeAllAsmParsers();
  llvm::install_fatal_error_handler(on_fatal_error, nullptr);
  save_options();

  unsigned char ready[ELFJIT_CS_READY_SIZE];
  put32(ready, ELFJIT_CS_READY_MAGIC);
  put32(ready + 4, ELFJIT_CS_VERSION);
  put32(ready + 8, LLVM_VERSION_MAJOR);
  write_fully(ready, sizeof ready);
  while (serve_one()) {
  }
  return 0;
}
