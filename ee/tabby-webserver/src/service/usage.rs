//! [`UsageService`]: daily completion statistics and user events from SQLite.

use async_trait::async_trait;
use chrono::{DateTime, NaiveTime, Utc};
use tabby_db::{DailyStatsQuery, DbConn};
use tabby_schema::{
    AsID, CoreError, Result,
    relay::RelayArgs,
    usage::{CompletionStats, EventKind, Language, UsageService, UserEvent, UserEventConnection},
};

pub struct UsageServiceImpl {
    db: DbConn,
}

impl UsageServiceImpl {
    pub fn new(db: DbConn) -> Self {
        Self { db }
    }
}

fn clamp_i32(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[async_trait]
impl UsageService for UsageServiceImpl {
    async fn daily_stats(
        &self,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        users: Vec<i64>,
        languages: Vec<Language>,
    ) -> Result<Vec<CompletionStats>> {
        let ids: Vec<String> = languages
            .iter()
            .flat_map(|l| l.language_ids().iter().map(|s| s.to_string()))
            .collect();
        let known: Vec<String> = Language::NAMED
            .iter()
            .flat_map(|l| l.language_ids().iter().map(|s| s.to_string()))
            .collect();
        let with_other = languages.contains(&Language::Other);
        let mut query_languages = ids;
        if with_other && query_languages.is_empty() {
            // Only OTHER: match nothing by name, everything outside the known list.
            query_languages.push(String::new());
        }
        let rows = self
            .db
            .compute_daily_stats(DailyStatsQuery {
                start,
                end,
                user_ids: &users,
                languages: &query_languages,
                other_than: with_other.then_some(known.as_slice()),
            })
            .await?;
        // Several editor language ids fold into one enum value: sum them per day.
        let mut out: Vec<CompletionStats> = Vec::new();
        for row in rows {
            let language = Language::from_language_id(&row.language);
            let day = row.start;
            let day_end = (day.date_naive() + chrono::Days::new(1))
                .and_time(NaiveTime::MIN)
                .and_utc();
            match out
                .iter_mut()
                .find(|s| s.start == day && s.language == language)
            {
                Some(stats) => {
                    stats.completions += clamp_i32(row.completions);
                    stats.views += clamp_i32(row.views);
                    stats.selects += clamp_i32(row.selects);
                }
                None => out.push(CompletionStats {
                    start: day,
                    end: day_end,
                    language,
                    completions: clamp_i32(row.completions),
                    views: clamp_i32(row.views),
                    selects: clamp_i32(row.selects),
                }),
            }
        }
        Ok(out)
    }

    async fn user_events(
        &self,
        page: RelayArgs,
        users: Vec<i64>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<UserEventConnection> {
        let page = page
            .paginate(
                |e: &UserEvent| e.id.to_string(),
                |p| async move {
                    self.db
                        .list_user_events(&users, start, end, p)
                        .await?
                        .into_iter()
                        .map(|e| {
                            Ok(UserEvent {
                                id: e.id.as_id(),
                                user_id: e.user_id.as_id(),
                                kind: EventKind::from_db_str(&e.kind).ok_or_else(|| {
                                    CoreError::Other(anyhow::anyhow!(
                                        "unknown event kind {:?} in user_events",
                                        e.kind
                                    ))
                                })?,
                                created_at: e.created_at,
                                payload: e.payload,
                            })
                        })
                        .collect()
                },
            )
            .await?;
        Ok(page.into())
    }
}
