//! The progress line of a matrix run on stderr: a bar, the current point
//! and repetition, and the measuring time left. On a terminal it redraws
//! in place once a second; otherwise one line per repetition.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_matrix::report::{micros, thousands};
use cairn_matrix::PointResult;

struct State {
    line: String,
    /// Seconds of measuring left after the current repetition.
    after: u64,
    /// When the current repetition started.
    rep_start: Instant,
    active: bool,
}

pub struct Progress {
    points: usize,
    left: u64,
    tty: bool,
    state: Arc<Mutex<State>>,
}

fn fmt_left(s: u64) -> String {
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl Progress {
    pub fn new(points: usize, measured_seconds: u64) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let state = Arc::new(Mutex::new(State {
            line: String::new(),
            after: measured_seconds,
            rep_start: Instant::now(),
            active: false,
        }));
        if tty {
            let ticker = state.clone();
            std::thread::spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                let Ok(s) = ticker.lock() else { return };
                if s.active {
                    draw(&s);
                }
            });
        }
        Progress {
            points,
            left: measured_seconds,
            tty,
            state,
        }
    }

    /// Repetition `rep` of point `n` (`id`) starts.
    pub fn show(&mut self, n: usize, id: &str, rep: u32, reps: u32) {
        let width = 20;
        let filled = n * width / self.points.max(1);
        let line = format!(
            "[{}{}] {}/{} {id} rep {}/{reps}",
            "#".repeat(filled),
            "-".repeat(width - filled),
            n + 1,
            self.points,
            rep + 1
        );
        let Ok(mut s) = self.state.lock() else { return };
        s.line = line;
        s.rep_start = Instant::now();
        s.after = self.left;
        s.active = true;
        if self.tty {
            draw(&s);
        } else {
            eprintln!("{}, {} left", s.line, fmt_left(self.left));
        }
    }

    /// The repetition that started last took `seconds` of measuring.
    pub fn done(&mut self, seconds: u64) {
        self.left = self.left.saturating_sub(seconds);
    }

    /// Print a finished point's result above the bar.
    pub fn finish_point(&mut self, r: &PointResult) {
        let text = match (&r.summary, &r.error) {
            (_, Some(e)) => format!("{}: FAILED: {e}", r.id),
            (Some(s), None) => format!(
                "{}: {} IOPS, mean {} us, p99.99 {} us",
                r.id,
                thousands(s.median.iops),
                micros(s.median.lat.mean_us),
                micros(s.median.lat.p99_99_us)
            ),
            (None, None) => format!("{}: no repetitions", r.id),
        };
        if self.tty {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{text}");
    }

    pub fn clear(&mut self) {
        if let Ok(mut s) = self.state.lock() {
            s.active = false;
        }
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

fn draw(s: &State) {
    let elapsed = s.rep_start.elapsed().as_secs();
    let left = s.after.saturating_sub(elapsed);
    let mut err = std::io::stderr();
    let _ = write!(err, "\r\x1b[2K{}, {} left", s.line, fmt_left(left));
    let _ = err.flush();
}
