//! A mutation fuzzer on stable Rust: no coverage feedback, but fast, deterministic for a seed,
//! and bounded by a case count or a time. It runs a target on its seeds and regressions, then
//! on stacked mutations of the seeds (bit flips, interesting integers at any offset, inserted,
//! deleted and duplicated ranges, splices of two seeds, words of the target's dictionary).
//!
//! A panic in the target is a crash: the input is written to `fuzz/artifacts/<target>/` and the
//! run stops. The crash becomes a regression by moving that file to `fuzz/regressions/<target>/`
//! together with the fix; `cargo test -p rndb-fuzz` replays every regression.

use std::cell::Cell;
use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use crate::targets::Target;

/// How long a run may go on.
#[derive(Clone, Debug)]
pub struct Options {
    /// Mutated cases to run after the seeds and regressions; `None` runs until `duration`.
    pub runs: Option<u64>,
    /// Wall time for the mutated cases; `None` runs until `runs`. At least one must be set.
    pub duration: Option<Duration>,
    /// Seed of the mutation sequence: the same seed replays the same cases.
    pub seed: u64,
    /// The longest input the mutations make.
    pub input_bytes_max: usize,
    /// Where the seed corpus, the regressions and the artifacts live (normally `fuzz/`).
    pub root: PathBuf,
}

impl Options {
    /// `runs` cases with seed `seed`, from this crate's folders.
    pub fn cases(runs: u64, seed: u64) -> Options {
        Options {
            runs: Some(runs),
            duration: None,
            seed,
            input_bytes_max: INPUT_BYTES_MAX_DEFAULT,
            root: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        }
    }
}

/// The longest input by default: more than any frame header plus a few payload fields needs,
/// and room for a config file of a dozen sections.
pub const INPUT_BYTES_MAX_DEFAULT: usize = 4096;

/// What a run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Inputs run: seeds, regressions and mutations.
    pub cases: u64,
    /// Seed files and regression files replayed (part of `cases`).
    pub files: usize,
    /// The first crash: its message and where its input was written.
    pub crash: Option<Crash>,
}

/// One input that made a target panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The panic message.
    pub message: String,
    /// The input, as written to `artifact`.
    pub input: Vec<u8>,
    /// The file holding the input (empty when it could not be written).
    pub artifact: PathBuf,
}

/// Runs `target` as `options` say and returns what happened; stops at the first crash.
pub fn run(target: &Target, options: &Options) -> anyhow::Result<Outcome> {
    assert!(
        options.runs.is_some() || options.duration.is_some(),
        "a run needs a case count or a duration"
    );
    install_quiet_hook();
    let mut seeds = read_dir_files(&options.root.join("corpus").join(target.name), None)?;
    for pattern in target.extra_seeds {
        let (dir, name) = pattern.rsplit_once('/').unwrap_or((".", pattern));
        let extension = name.strip_prefix("*.");
        seeds.extend(read_dir_files(
            &options.root.join("..").join(dir),
            extension,
        )?);
    }
    let regressions = read_dir_files(&options.root.join("regressions").join(target.name), None)?;
    let mut outcome = Outcome {
        cases: 0,
        files: seeds.len() + regressions.len(),
        crash: None,
    };
    for input in seeds.iter().chain(&regressions) {
        outcome.cases += 1;
        if let Some(crash) = run_one(target, input, &options.root) {
            outcome.crash = Some(crash);
            return Ok(outcome);
        }
    }
    let mut pool: Vec<Vec<u8>> = seeds.into_iter().chain(regressions).collect();
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let mut mutator = Mutator {
        rng: Rng(options.seed ^ 0x9E37_79B9_7F4A_7C15),
        dictionary: target.dictionary,
        input_bytes_max: options.input_bytes_max,
    };
    let start = Instant::now();
    let mut input = Vec::new();
    let mut mutated = 0u64;
    while options.runs.is_none_or(|runs| mutated < runs)
        && options.duration.is_none_or(|d| start.elapsed() < d)
    {
        // Half the time the next case mutates the last one further (stacked changes reach
        // deeper); otherwise it starts again from a seed.
        if input.is_empty() || mutator.rng.below(2) == 0 {
            input.clone_from(&pool[mutator.rng.below(pool.len())]);
        }
        let other = &pool[mutator.rng.below(pool.len())];
        mutator.mutate(&mut input, other);
        mutated += 1;
        outcome.cases += 1;
        if let Some(crash) = run_one(target, &input, &options.root) {
            outcome.crash = Some(crash);
            return Ok(outcome);
        }
    }
    Ok(outcome)
}

/// Replays the files `paths` through `target` (a crash artifact, say); the first crash found.
pub fn replay(target: &Target, paths: &[PathBuf], root: &Path) -> anyhow::Result<Option<Crash>> {
    install_quiet_hook();
    for path in paths {
        let input = fs::read(path).map_err(|e| anyhow::anyhow!("read {}: {e}", path.display()))?;
        if let Some(crash) = run_one(target, &input, root) {
            return Ok(Some(crash));
        }
    }
    Ok(None)
}

thread_local! {
    /// True while this thread runs a fuzz case: its panics are caught and reported by the
    /// runner, not printed by the default hook.
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
}

/// Wraps the panic hook once so that panics inside a fuzz case print nothing (the runner
/// reports them), and every other panic prints as before.
fn install_quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !IN_CASE.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs one input; a panic becomes a [`Crash`] whose input is saved under `root/artifacts`.
fn run_one(target: &Target, input: &[u8], root: &Path) -> Option<Crash> {
    IN_CASE.with(|c| c.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    IN_CASE.with(|c| c.set(false));
    let payload = result.err()?;
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "non-string panic".to_string());
    let dir = root.join("artifacts").join(target.name);
    let artifact = dir.join(format!("crash-{:016x}", fnv1a(input)));
    let written = fs::create_dir_all(&dir).and_then(|()| fs::write(&artifact, input));
    Some(Crash {
        message,
        input: input.to_vec(),
        artifact: if written.is_ok() {
            artifact
        } else {
            PathBuf::new()
        },
    })
}

/// Every file of `dir` (with `extension`, when given), in name order; a missing folder is
/// empty.
fn read_dir_files(dir: &Path, extension: Option<&str>) -> anyhow::Result<Vec<Vec<u8>>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => anyhow::bail!("read {}: {e}", dir.display()),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .filter(|path| extension.is_none_or(|e| path.extension().is_some_and(|x| x == e)))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| fs::read(path).map_err(|e| anyhow::anyhow!("read {}: {e}", path.display())))
        .collect()
}

/// FNV-1a: names a crash file after its bytes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// xorshift64*: small, fast, and the same sequence for the same seed on every machine.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // A zero state would stay zero.
        if self.0 == 0 {
            self.0 = 0x2545_F491_4F6C_DD1D;
        }
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Integers that sit on the edges decoders check: zero, one, the sign bits, all ones, and
/// the frame limits.
const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    15,
    16,
    20,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x7FFF,
    0x8000,
    0xFFFF,
    32 * 1024,
    32 * 1024 + 1,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    u64::MAX,
];

/// Changes inputs one small step at a time.
#[derive(Debug)]
struct Mutator {
    rng: Rng,
    dictionary: &'static [&'static [u8]],
    input_bytes_max: usize,
}

impl Mutator {
    /// Applies one to four changes to `input`; `other` is a second seed for splices.
    fn mutate(&mut self, input: &mut Vec<u8>, other: &[u8]) {
        for _ in 0..=self.rng.below(4) {
            self.step(input, other);
        }
        input.truncate(self.input_bytes_max);
    }

    fn step(&mut self, input: &mut Vec<u8>, other: &[u8]) {
        let len = input.len();
        match self.rng.below(9) {
            0 if len > 0 => {
                let at = self.rng.below(len);
                input[at] ^= 1 << self.rng.below(8);
            }
            1 if len > 0 => {
                let at = self.rng.below(len);
                input[at] = self.rng.next() as u8;
            }
            2 if len > 0 => {
                // An interesting integer, 1, 2, 4 or 8 bytes little-endian, at any offset.
                let width = 1 << self.rng.below(4);
                let value = INTERESTING[self.rng.below(INTERESTING.len())];
                let value = if self.rng.below(4) == 0 {
                    value.wrapping_add(len as u64)
                } else {
                    value
                };
                let at = self.rng.below(len);
                let end = (at + width).min(len);
                input[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
            }
            3 => {
                let at = self.rng.below(len + 1);
                let count = 1 + self.rng.below(8);
                let bytes: Vec<u8> = (0..count).map(|_| self.rng.next() as u8).collect();
                input.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let at = self.rng.below(len);
                let count = 1 + self.rng.below((len - at).min(16));
                input.drain(at..at + count);
            }
            5 if len > 0 => {
                // Duplicate a range somewhere else: repeated fields, repeated lines.
                let from = self.rng.below(len);
                let count = 1 + self.rng.below((len - from).min(64));
                let chunk = input[from..from + count].to_vec();
                let at = self.rng.below(len + 1);
                input.splice(at..at, chunk);
            }
            6 if !other.is_empty() => {
                // A splice: our head, the other seed's tail.
                let cut = self.rng.below(len + 1);
                let from = self.rng.below(other.len());
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            7 if !self.dictionary.is_empty() => {
                let word = self.dictionary[self.rng.below(self.dictionary.len())];
                let at = self.rng.below(len + 1);
                input.splice(at..at, word.iter().copied());
            }
            8 if len > 0 => {
                input.truncate(self.rng.below(len));
            }
            _ => input.push(self.rng.next() as u8),
        }
    }
}
