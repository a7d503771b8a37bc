//! The results: one row per figure, ours beside each peer's, printed as a markdown table and
//! written as JSON.

use serde::Serialize;

/// One system's figure in a row: a number, or why the system cannot take this measure.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Cell {
    Value(f64),
    NotApplicable { not_applicable: String },
}

impl Cell {
    /// "n/a" with the reason.
    pub fn na(why: impl Into<String>) -> Self {
        Cell::NotApplicable { not_applicable: why.into() }
    }

    fn value(&self) -> Option<f64> {
        match self {
            Cell::Value(v) => Some(*v),
            Cell::NotApplicable { .. } => None,
        }
    }

    fn show(&self) -> String {
        match self {
            Cell::Value(v) => fmt_num(*v),
            Cell::NotApplicable { .. } => "n/a".into(),
        }
    }
}

/// Whether a bigger or a smaller figure is better (to state ratios as "ours is N× better").
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
    /// A figure that gives context (how busy the machine was), not a score: no ratio.
    Neither,
}

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Section: `fan-out`, `latency`, `replay`, `memory`, `failover`.
    pub section: String,
    /// What the figure is, with its unit (`delivered events per CPU-second`).
    pub figure: String,
    /// How it was measured: clients, canvases, event size, rate, duration, broker.
    pub setup: String,
    pub better: Better,
    pub ours: Cell,
    pub centrifugo: Cell,
    pub socketio: Cell,
    /// The bar this figure is judged by, in words, when there is one.
    pub target: Option<String>,
    /// Whether the bar was met (`None`: no bar, or not measurable at this size).
    pub met: Option<bool>,
}

impl Row {
    /// A row without peers' figures (they get "n/a" with `why`) and without a target.
    pub fn ours_only(section: &str, figure: &str, setup: String, better: Better, ours: f64, why: &str) -> Self {
        Self {
            section: section.into(),
            figure: figure.into(),
            setup,
            better,
            ours: Cell::Value(ours),
            centrifugo: Cell::na(why),
            socketio: Cell::na(why),
            target: None,
            met: None,
        }
    }

    /// Sets the target and whether it was met.
    pub fn with_target(mut self, target: impl Into<String>, met: bool) -> Self {
        self.target = Some(target.into());
        self.met = Some(met);
        self
    }

    /// "ours ÷ peer" stated so that > 1 means ours is better.
    fn advantage(&self, peer: &Cell) -> Option<f64> {
        let (o, p) = (self.ours.value()?, peer.value()?);
        match self.better {
            Better::Higher if p > 0.0 => Some(o / p),
            Better::Lower if o > 0.0 => Some(p / o),
            Better::Higher | Better::Lower | Better::Neither => None,
        }
    }
}

/// Everything one run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// `tiny` or `full`.
    pub size: String,
    pub machine: String,
    pub broker: String,
    /// The command that reproduces the run.
    pub command: String,
    pub started_at: String,
    pub duration_s: f64,
    pub rows: Vec<Row>,
    /// Measures that failed, with the error.
    pub errors: Vec<String>,
}

/// A number for a table: integers as such, small numbers with 2–3 significant digits.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    if a >= 1000.0 {
        let s = format!("{:.0}", v);
        // thousands separators
        let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{sign}{out}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Results {
    /// The markdown report: a header describing the run, then one table.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        s += &format!("Run: `{}` ({} size), {}\n\n", self.command, self.size, self.started_at);
        s += &format!("- Machine: {}\n- Broker: {}\n- Took {:.0} s\n\n", self.machine, self.broker, self.duration_s);
        s += "| measure | figure | ours | Centrifugo | Socket.IO | ours vs Centrifugo | ours vs Socket.IO | target | met |\n";
        s += "|---|---|---:|---:|---:|---:|---:|---|---|\n";
        for r in &self.rows {
            let ratio = |p: &Cell| self::ratio_text(r.advantage(p));
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.section,
                r.figure,
                r.ours.show(),
                r.centrifugo.show(),
                r.socketio.show(),
                ratio(&r.centrifugo),
                ratio(&r.socketio),
                r.target.as_deref().unwrap_or(""),
                match r.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "",
                }
            );
        }
        s += "\nHow each figure was measured:\n\n";
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.rows {
            if seen.insert((r.section.clone(), r.setup.clone())) {
                s += &format!("- **{}**: {}\n", r.section, r.setup);
            }
        }
        let mut why = std::collections::BTreeSet::new();
        for r in &self.rows {
            for (name, c) in [("Centrifugo", &r.centrifugo), ("Socket.IO", &r.socketio), ("ours", &r.ours)] {
                if let Cell::NotApplicable { not_applicable } = c {
                    why.insert(format!("- n/a for {name} in {}: {not_applicable}\n", r.section));
                }
            }
        }
        if !why.is_empty() {
            s += "\nWhere a figure is n/a:\n\n";
            s.extend(why);
        }
        if !self.errors.is_empty() {
            s += "\nMeasures that failed:\n\n";
            for e in &self.errors {
                s += &format!("- {e}\n");
            }
        }
        s
    }
}

fn ratio_text(r: Option<f64>) -> String {
    r.map_or_else(String::new, |r| format!("{}× {}", fmt_num(r), if r >= 1.0 { "better" } else { "worse" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_readable() {
        for (v, want) in [(1234567.0, "1,234,567"), (-4500.0, "-4,500"), (512.4, "512"), (12.34, "12.3"), (0.456, "0.46")] {
            assert_eq!(fmt_num(v), want, "{v}");
        }
    }

    #[test]
    fn ratios_say_which_way_is_better() {
        let mut r = Row::ours_only("fan-out", "events/CPU-s", "x".into(), Better::Higher, 200.0, "-");
        r.centrifugo = Cell::Value(100.0);
        assert_eq!(r.advantage(&r.centrifugo), Some(2.0));
        r.better = Better::Lower;
        assert_eq!(r.advantage(&r.centrifugo), Some(0.5));
        assert_eq!(r.advantage(&Cell::na("no log")), None);
        assert_eq!(ratio_text(Some(0.5)), "0.50× worse");
        r.better = Better::Neither;
        assert_eq!(r.advantage(&r.centrifugo), None, "a context figure gets no ratio");
    }
}
