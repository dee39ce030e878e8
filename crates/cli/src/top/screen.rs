//! The live screen: redrawn in place when a watched object changes (bursts coalesced) and
//! once a second for ages; `q`, Esc or Ctrl-C quits, arrows and Page keys scroll.
//! `NO_COLOR` (any non-empty value) draws without colour.

use std::time::Duration;

use kk_live::fleet_watch::FleetWatch;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::layout::{self, Tone};
use crate::Failure;

/// How long a burst of watch events may last before the screen follows.
const COALESCE: Duration = Duration::from_millis(300);

enum Key {
    Quit,
    Scroll(isize),
    Other,
}

fn style(tone: Tone, color: bool) -> Style {
    if !color {
        return match tone {
            Tone::Heading => Style::default().add_modifier(Modifier::BOLD),
            _ => Style::default(),
        };
    }
    match tone {
        Tone::Plain => Style::default(),
        Tone::Heading => Style::default().add_modifier(Modifier::BOLD),
        Tone::Good => Style::default().fg(Color::Green),
        Tone::Warn => Style::default().fg(Color::Yellow),
        Tone::Bad => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        Tone::Dim => Style::default().fg(Color::DarkGray),
    }
}

/// `HH:MM:SS` UTC.
fn clock(now: i64) -> String {
    let s = now.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

fn read_keys(tx: tokio::sync::mpsc::UnboundedSender<Key>) {
    loop {
        let key = match event::read() {
            Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => match k.code {
                KeyCode::Char('q') | KeyCode::Esc => Key::Quit,
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Quit,
                KeyCode::Down | KeyCode::Char('j') => Key::Scroll(1),
                KeyCode::Up | KeyCode::Char('k') => Key::Scroll(-1),
                KeyCode::PageDown | KeyCode::Char(' ') => Key::Scroll(20),
                KeyCode::PageUp => Key::Scroll(-20),
                _ => Key::Other,
            },
            Ok(_) => Key::Other,
            Err(_) => return,
        };
        if tx.send(key).is_err() {
            return;
        }
    }
}

pub async fn run(mut watch: FleetWatch, pool: Option<String>) -> Result<(), Failure> {
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let (tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || read_keys(tx));
    let mut terminal = ratatui::init();
    let mut scroll: usize = 0;
    let mut last_error = String::new();
    let outcome: Result<(), Failure> = async {
        loop {
            let now = super::unix_now();
            let fleet = super::view(&super::sources(watch.documents()), now, pool.as_deref())?;
            if let Some(e) = watch.take_errors().pop() {
                last_error = e;
            }
            terminal.draw(|frame| {
                let area = frame.area();
                let width = usize::from(area.width).max(layout::MIN_WIDTH);
                let mut lines = layout::lines(&fleet, width, &clock(now));
                let footer = if last_error.is_empty() {
                    "q quit  ↑↓ PgUp PgDn scroll  (watching the cluster)".to_owned()
                } else {
                    format!("q quit  ↑↓ scroll  watch error, retrying: {last_error}")
                };
                let height = usize::from(area.height).saturating_sub(1);
                scroll = scroll.min(lines.len().saturating_sub(height));
                let mut shown: Vec<Line> = lines
                    .drain(..)
                    .skip(scroll)
                    .take(height)
                    .map(|l| {
                        Line::from(
                            l.into_iter()
                                .map(|(t, tone)| Span::styled(t, style(tone, color)))
                                .collect::<Vec<_>>(),
                        )
                    })
                    .collect();
                while shown.len() < height {
                    shown.push(Line::default());
                }
                shown.push(Line::from(Span::styled(footer, style(Tone::Dim, color))));
                frame.render_widget(Paragraph::new(shown), area);
            })?;
            tokio::select! {
                () = watch.changed() => tokio::time::sleep(COALESCE).await,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                key = keys.recv() => match key {
                    None | Some(Key::Quit) => return Ok(()),
                    Some(Key::Scroll(d)) => scroll = scroll.saturating_add_signed(d),
                    Some(Key::Other) => {}
                },
            }
        }
    }
    .await;
    ratatui::restore();
    outcome
}
