//! elfjit-observe: make JIT kernels visible to profilers, debuggers and unwinders.
//!
//! A module elfjit loaded is an anonymous range of executable memory. When a feature is on,
//! [`publish`] tells the tools about it:
//!
//! - **perf map** ([`Features::PERF_MAP`]): a line `START SIZE name` per function, stub and
//!   veneer in `/tmp/perf-<pid>.map` ([`perf_map`]).
//! - **jitdump** ([`Features::JITDUMP`]): `JIT_CODE_LOAD` records with each function's code,
//!   after `JIT_CODE_DEBUG_INFO` line records from its DWARF when it was compiled with `-g`,
//!   in `jit-<pid>.dump` for `perf inject --jit` ([`jitdump`]).
//! - **GDB JIT interface** ([`Features::GDB`]): one in-memory symbol file per object,
//!   registered through `__jit_debug_descriptor` ([`gdb_jit`]), unregistered on drop.
//! - **unwinding**: a loaded `.eh_frame` (the object was compiled with `-funwind-tables`) is
//!   registered with the process's unwinder ([`unwind`]) whatever the features, since
//!   loading one means unwinding through the code was asked for.
//!
//! Features are switched on by [`enable`] or, for programs that do not know about elfjit,
//! by the environment (read once, on first use): `ELFJIT_PERF=map`, `ELFJIT_PERF=jitdump`
//! (or both, comma-separated) and `ELFJIT_GDB=1`. With none on and no `.eh_frame` loaded,
//! [`observe_image`] returns after one atomic load: no system call, no allocation, no file.

pub mod gdb_jit;
pub mod jitdump;
mod lines;
pub mod notes;
pub mod perf_map;
mod published;
// The observers' OS calls, one file per OS (each opens with what its OS gives and lacks).
#[cfg_attr(unix, path = "platform_unix.rs")]
#[cfg_attr(windows, path = "platform_windows.rs")]
mod platform;
#[cfg_attr(windows, path = "safe_file_windows.rs")]
mod safe_file;
pub mod unwind;

pub use gdb_jit::{registered_entries, symbol_file};
pub use published::{CodeKind, CodeRange, LinkerCode, LoadedObject, Published};
pub use unwind::{unwinder_kind, UnwinderKind};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// A set of observers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features(u8);

impl Features {
    /// None.
    pub const NONE: Features = Features(0);
    /// Lines in `/tmp/perf-<pid>.map`.
    pub const PERF_MAP: Features = Features(1);
    /// Records in `jit-<pid>.dump`.
    pub const JITDUMP: Features = Features(2);
    /// Symbol files registered with the GDB JIT interface.
    pub const GDB: Features = Features(4);

    const ALL_BITS: u8 = 7;

    /// Whether every feature of `other` is in `self`.
    pub const fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no feature is on.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for Features {
    type Output = Features;
    fn bitor(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }
}

/// Why observing failed.
#[derive(Debug)]
pub enum Error {
    /// A file could not be created or written.
    Io {
        /// What was being done ("open the perf map").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS's reason.
        source: std::io::Error,
    },
    /// An environment variable has a value this crate does not know.
    Env {
        /// The variable (`ELFJIT_PERF`, `ELFJIT_GDB`).
        variable: &'static str,
        /// Its value, as given.
        value: String,
    },
    /// An object could not be read as the observers need it.
    Object {
        /// The module's name.
        module: String,
        /// What could not be read.
        what: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, path, source } => {
                write!(f, "cannot {what} {}: {source}", path.display())
            }
            Error::Env { variable, value } => write!(
                f,
                "{variable}={value:?} is not understood (ELFJIT_PERF takes map, jitdump or \
                 map,jitdump; ELFJIT_GDB takes 1 or 0)"
            ),
            Error::Object { module, what } => write!(f, "module {module}: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The open files and switches, behind one lock.
struct State {
    perf_map: Option<perf_map::PerfMap>,
    jitdump: Option<jitdump::Jitdump>,
}

static STATE: Mutex<State> = Mutex::new(State {
    perf_map: None,
    jitdump: None,
});

/// The features on, as bits, plus `ENV_READ` once the environment was read.
static ACTIVE: AtomicU8 = AtomicU8::new(0);
const ENV_READ: u8 = 0x80;
const ENV_BAD: u8 = 0x40;

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the environment asks for.
fn env_features() -> Result<Features, Error> {
    let mut features = Features::NONE;
    if let Some(value) = std::env::var_os("ELFJIT_PERF") {
        let value = value.to_string_lossy().into_owned();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            features = features
                | match part {
                    "map" => Features::PERF_MAP,
                    "jitdump" => Features::JITDUMP,
                    _ => {
                        return Err(Error::Env {
                            variable: "ELFJIT_PERF",
                            value,
                        })
                    }
                };
        }
    }
    if let Some(value) = std::env::var_os("ELFJIT_GDB") {
        match value.to_string_lossy().trim() {
            "" | "0" => {}
            "1" => features = features | Features::GDB,
            other => {
                return Err(Error::Env {
                    variable: "ELFJIT_GDB",
                    value: other.to_string(),
                })
            }
        }
    }
    Ok(features)
}

/// The features on. The first call reads `ELFJIT_PERF` and `ELFJIT_GDB` and opens the files
/// they ask for; later calls are one atomic load (an unreadable environment is reported by
/// every call). A perf map that cannot be opened (see [`enable`]) is skipped with one
/// note on stderr, the other features staying on.
pub fn features() -> Result<Features, Error> {
    let bits = ACTIVE.load(Ordering::Acquire);
    if bits & ENV_READ != 0 && bits & ENV_BAD == 0 {
        return Ok(Features(bits & Features::ALL_BITS));
    }
    match env_features() {
        Ok(mut wanted) => {
            if wanted.contains(Features::PERF_MAP) {
                // A program that does not know about elfjit asked for it: a perf map that
                // cannot be opened (someone planted a FIFO or a file of theirs at the name
                // perf looks for) costs one note, not every load.
                if let Err(e) = enable(Features::PERF_MAP) {
                    notes::once("perf map", "cannot-open", || {
                        format!("ELFJIT_PERF=map: not writing a perf map: {e}")
                    });
                    wanted = Features(wanted.0 & !Features::PERF_MAP.0);
                }
            }
            // Nothing asked for (the common case): no files, and none of `enable`'s
            // path-making (a `getpid`, a format, an environment read) on the first load.
            if !wanted.is_empty() {
                enable(wanted)?;
            }
            ACTIVE.fetch_or(ENV_READ, Ordering::AcqRel);
            ACTIVE.fetch_and(!ENV_BAD, Ordering::AcqRel);
            Ok(Features(
                ACTIVE.load(Ordering::Acquire) & Features::ALL_BITS,
            ))
        }
        Err(e) => {
            ACTIVE.fetch_or(ENV_READ | ENV_BAD, Ordering::AcqRel);
            Err(e)
        }
    }
}

/// Switches `features` on for every module published from now on, opening their files
/// (`/tmp/perf-<pid>.map`; a jitdump in a new directory under `$JITDUMPDIR`, or `/tmp`).
/// Features already on stay on. An existing perf map is used only if it is a regular file
/// of this user's, with one link, that group and others cannot write; anything else
/// (a symbolic link, a FIFO, another user's file) is an [`Error::Io`] at once, never a
/// wait.
pub fn enable(features: Features) -> Result<(), Error> {
    let dir = std::env::var_os("JITDUMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    enable_with(features, &perf_map::default_path(), &dir)
}

/// [`enable`] with the perf map at `perf_map` and the jitdump's directory under
/// `jitdump_dir` (perf itself only looks for `/tmp/perf-<pid>.map`).
pub fn enable_with(features: Features, perf_map: &Path, jitdump_dir: &Path) -> Result<(), Error> {
    let mut state = state();
    if features.contains(Features::PERF_MAP) && state.perf_map.is_none() {
        state.perf_map = Some(
            perf_map::PerfMap::open(perf_map).map_err(|source| Error::Io {
                what: "open the perf map",
                path: perf_map.to_path_buf(),
                source,
            })?,
        );
    }
    if features.contains(Features::JITDUMP) && state.jitdump.is_none() {
        state.jitdump =
            Some(
                jitdump::Jitdump::create(jitdump_dir).map_err(|source| Error::Io {
                    what: "create a jitdump in",
                    path: jitdump_dir.to_path_buf(),
                    source,
                })?,
            );
    }
    ACTIVE.fetch_or(features.0 & Features::ALL_BITS, Ordering::AcqRel);
    Ok(())
}

/// Switches `features` off for modules published from now on (files stay open, and
/// modules already registered stay so until dropped).
pub fn disable(features: Features) {
    ACTIVE.fetch_and(!(features.0 & Features::ALL_BITS), Ordering::AcqRel);
}

/// The perf map's path, once it is open.
pub fn perf_map_path() -> Option<PathBuf> {
    state().perf_map.as_ref().map(|m| m.path().to_path_buf())
}

/// The jitdump's path, once it is open.
pub fn jitdump_path() -> Option<PathBuf> {
    state().jitdump.as_ref().map(|d| d.path().to_path_buf())
}

/// What a module's publication registered; unregistered when dropped. Drop it before the
/// module's memory is unmapped.
#[derive(Default)]
pub struct Registration {
    frames: Option<unwind::Frames>,
    gdb: Vec<gdb_jit::Entry>,
}

impl Registration {
    /// Whether an `.eh_frame` was registered with the unwinder.
    pub fn unwinds(&self) -> bool {
        self.frames.is_some()
    }

    /// How many symbol files were registered with the GDB JIT interface.
    pub fn debugger_entries(&self) -> usize {
        self.gdb.len()
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("unwinds", &self.unwinds())
            .field("debugger_entries", &self.debugger_entries())
            .finish()
    }
}

/// Tells the tools switched on about `module`, and registers its `.eh_frame` sections.
///
/// # Safety
/// Every address in `module` (its sections, functions and linker code) is memory of this
/// process that is mapped readable and stays so, unchanged, until the returned
/// [`Registration`] is dropped.
pub unsafe fn publish(module: &Published<'_>) -> Result<Registration, Error> {
    let features = features()?;
    // SAFETY: the caller keeps the module's memory mapped until the registration is dropped.
    let frames = unsafe { unwind::register(module.name, &module.eh_frames()?)? };
    let mut registration = Registration {
        frames,
        gdb: Vec::new(),
    };
    if features.contains(Features::PERF_MAP) || features.contains(Features::JITDUMP) {
        let ranges = module.code_ranges()?;
        if features.contains(Features::PERF_MAP) {
            write_perf_map(&ranges)?;
        }
        if features.contains(Features::JITDUMP) {
            // SAFETY: as above: the code of every range is mapped readable.
            unsafe { write_jitdump(module, &ranges)? };
        }
    }
    if features.contains(Features::GDB) {
        for object in &module.objects {
            let symfile = gdb_jit::symbol_file(module.name, object)?;
            registration.gdb.push(gdb_jit::register(symfile));
        }
    }
    Ok(registration)
}

fn write_perf_map(ranges: &[CodeRange]) -> Result<(), Error> {
    let mut state = state();
    let Some(map) = state.perf_map.as_mut() else {
        return Ok(());
    };
    map.append(ranges).map_err(|source| Error::Io {
        what: "write the perf map",
        path: map.path().to_path_buf(),
        source,
    })
}

/// # Safety
/// Each range's bytes are mapped readable.
unsafe fn write_jitdump(module: &Published<'_>, ranges: &[CodeRange]) -> Result<(), Error> {
    // Lines are read only for objects with functions; an object whose DWARF cannot be read
    // still gets its code records, without lines.
    let tables: Vec<lines::LineTable> = module
        .objects
        .iter()
        .map(|object| lines::line_table(module.name, object).unwrap_or_default())
        .collect();
    let records: Vec<jitdump::FunctionRecord<'_>> = ranges
        .iter()
        .map(|range| {
            let table = range.object.and_then(|o| tables.get(o));
            jitdump::FunctionRecord {
                range,
                // SAFETY: the caller guarantees the range is mapped readable.
                code: unsafe {
                    std::slice::from_raw_parts(
                        range.address as usize as *const u8,
                        range.size as usize,
                    )
                },
                lines: table.map_or_else(Vec::new, |t| t.rows_in(range.address, range.size)),
                files: table.map_or(&[][..], |t| &t.files),
            }
        })
        .collect();
    let mut state = state();
    let Some(dump) = state.jitdump.as_mut() else {
        return Ok(());
    };
    dump.append(&records).map_err(|source| Error::Io {
        what: "write the jitdump",
        path: dump.path().to_path_buf(),
        source,
    })
}

/// Publishes a module the core linked: the gate for the load path. Returns `None` at the
/// cost of one atomic load and a look at the objects' section names when no feature is on
/// and no `.eh_frame` was loaded.
///
/// # Safety
/// The image's memory is mapped in this process, readable, and stays so, unchanged, until
/// the returned [`Registration`] is dropped.
pub unsafe fn observe_image(
    name: &str,
    objects: &[&[u8]],
    image: &elfjit_core::Image<'_, '_>,
) -> Result<Option<Registration>, Error> {
    let Some(published) = describe_image(name, objects, image)? else {
        return Ok(None);
    };
    // SAFETY: the caller's guarantee, passed on.
    unsafe { publish(&published) }.map(Some)
}

/// What [`observe_image`] would publish for `image`, or `None` behind the same gate (no
/// feature on, no `.eh_frame` loaded). For a loader that makes the memory runnable after
/// the image is gone (a batch published at once): describe each image as it is linked,
/// then [`publish`] each description once its memory is published.
pub fn describe_image<'a>(
    name: &'a str,
    objects: &[&'a [u8]],
    image: &elfjit_core::Image<'_, '_>,
) -> Result<Option<Published<'a>>, Error> {
    if features()?.is_empty() && !has_eh_frame(image) {
        return Ok(None);
    }
    Ok(Some(Published::from_image(name, objects, image)))
}

/// Whether the image loaded an `.eh_frame` section.
fn has_eh_frame(image: &elfjit_core::Image<'_, '_>) -> bool {
    image.plan().objects().enumerate().any(|(index, object)| {
        (0..object.section_count()).any(|s| {
            object
                .section(s)
                .is_ok_and(|section| section.name == b".eh_frame")
                && image.section_address(index, s).is_some()
        })
    })
}

impl<'a> Published<'a> {
    /// The description of a module the core linked from `objects` (in link order).
    pub fn from_image(
        name: &'a str,
        objects: &[&'a [u8]],
        image: &elfjit_core::Image<'_, '_>,
    ) -> Published<'a> {
        let objects = objects
            .iter()
            .enumerate()
            .map(|(index, bytes)| {
                let count = image
                    .plan()
                    .objects()
                    .nth(index)
                    .map_or(0, |o| o.section_count());
                LoadedObject {
                    bytes,
                    section_addresses: (0..count)
                        .map(|s| image.section_address(index, s))
                        .collect(),
                }
            })
            .collect();
        let kind = if image.plan().arch() == elfjit_core::Arch::Aarch64 {
            CodeKind::Veneer
        } else {
            CodeKind::Stub
        };
        let linker_code = image
            .stubs()
            .map(|stub| LinkerCode {
                target: String::from_utf8_lossy(stub.target).into_owned(),
                address: stub.address,
                size: stub.size,
                kind,
            })
            .collect();
        Published {
            name,
            objects,
            linker_code,
        }
    }
}
