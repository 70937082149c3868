use chrono::{DateTime, TimeZone, Utc};
use tabby_db::{CompletionCounter, DailyStatsDAO, DailyStatsQuery, DbError, Pagination};

use crate::{db, user};

fn at(day: u32, hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, day, hour, 0, 0).unwrap()
}

#[tokio::test]
async fn user_events_by_user_and_time_range() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    let b = user(&db, "b@example.com").await;
    let e1 = db
        .create_user_event(a, "completion", at(1, 9), r#"{"completion_id":"c1"}"#)
        .await
        .unwrap();
    let e2 = db
        .create_user_event(b, "view", at(1, 10), "{}")
        .await
        .unwrap();
    let e3 = db
        .create_user_event(a, "select", at(2, 9), "{}")
        .await
        .unwrap();
    let _late = db
        .create_user_event(a, "dismiss", at(5, 0), "{}")
        .await
        .unwrap();

    let ids =
        |events: Vec<tabby_db::UserEventDAO>| events.into_iter().map(|e| e.id).collect::<Vec<_>>();
    let all = db
        .list_user_events(&[], at(1, 0), at(5, 0), Pagination::all())
        .await
        .unwrap();
    assert_eq!(all[0].kind, "completion");
    assert_eq!(all[0].created_at, at(1, 9));
    assert_eq!(all[0].payload, r#"{"completion_id":"c1"}"#);
    assert_eq!(ids(all), [e1, e2, e3], "end is exclusive");

    let of_a = db
        .list_user_events(&[a], at(1, 0), at(6, 0), Pagination::all())
        .await
        .unwrap();
    assert_eq!(of_a.len(), 3);
    assert!(of_a.iter().all(|e| e.user_id == a));

    let from_start = db
        .list_user_events(&[], at(1, 10), at(3, 0), Pagination::all())
        .await
        .unwrap();
    assert_eq!(ids(from_start), [e2, e3], "start is inclusive");

    let page = Pagination::relay(Some(e1), None, Some(1), None).unwrap();
    let paged = db
        .list_user_events(&[], at(1, 0), at(6, 0), page)
        .await
        .unwrap();
    assert_eq!(ids(paged), [e2]);

    assert!(matches!(
        db.create_user_event(99, "view", at(1, 0), "{}").await,
        Err(DbError::NotFound { what: "user" })
    ));
}

#[tokio::test]
async fn completion_counters_follow_events() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    db.create_user_completion(a, "cmpl-1", "rust", at(1, 9))
        .await
        .unwrap();
    for counter in [
        CompletionCounter::View,
        CompletionCounter::View,
        CompletionCounter::Select,
        CompletionCounter::Dismiss,
    ] {
        assert!(
            db.increment_user_completion("cmpl-1", counter)
                .await
                .unwrap()
        );
    }
    assert!(
        !db.increment_user_completion("unknown", CompletionCounter::View)
            .await
            .unwrap()
    );
    let stats = db
        .compute_daily_stats(DailyStatsQuery {
            start: at(1, 0),
            end: at(2, 0),
            user_ids: &[],
            languages: &[],
            other_than: None,
        })
        .await
        .unwrap();
    assert_eq!(
        stats,
        [DailyStatsDAO {
            start: at(1, 0),
            language: "rust".into(),
            completions: 1,
            views: 2,
            selects: 1,
            dismisses: 1,
        }]
    );
}

#[tokio::test]
async fn daily_stats_group_by_day_and_language_with_filters() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    let b = user(&db, "b@example.com").await;
    let rows = [
        (a, "c1", "rust", at(1, 9)),
        (a, "c2", "rust", at(1, 23)),
        (b, "c3", "python", at(1, 12)),
        (b, "c4", "rust", at(2, 0)),
        (a, "c5", "haskell", at(2, 8)),
        (a, "c6", "rust", at(9, 8)),
    ];
    for (user, id, language, time) in rows {
        db.create_user_completion(user, id, language, time)
            .await
            .unwrap();
    }
    db.increment_user_completion("c2", CompletionCounter::Select)
        .await
        .unwrap();
    let summary = |stats: Vec<DailyStatsDAO>| {
        stats
            .into_iter()
            .map(|s| {
                (
                    s.start.format("%d").to_string(),
                    s.language,
                    s.completions,
                    s.selects,
                )
            })
            .collect::<Vec<_>>()
    };
    let query = DailyStatsQuery {
        start: at(1, 0),
        end: at(3, 0),
        user_ids: &[],
        languages: &[],
        other_than: None,
    };
    let row = |day: &str, language: &str, completions, selects| {
        (day.to_owned(), language.to_owned(), completions, selects)
    };
    assert_eq!(
        summary(db.compute_daily_stats(query).await.unwrap()),
        [
            row("01", "python", 1, 0),
            row("01", "rust", 2, 1),
            row("02", "haskell", 1, 0),
            row("02", "rust", 1, 0),
        ]
    );

    let only_b = DailyStatsQuery {
        user_ids: &[b],
        ..query
    };
    assert_eq!(
        summary(db.compute_daily_stats(only_b).await.unwrap()),
        [row("01", "python", 1, 0), row("02", "rust", 1, 0)]
    );

    let rust = ["rust".to_owned()];
    let only_rust = DailyStatsQuery {
        languages: &rust,
        ..query
    };
    assert_eq!(
        summary(db.compute_daily_stats(only_rust).await.unwrap()),
        [row("01", "rust", 2, 1), row("02", "rust", 1, 0)]
    );

    // "rust plus every language outside the known list (rust, python)".
    let known = ["rust".to_owned(), "python".to_owned()];
    let rust_and_other = DailyStatsQuery {
        languages: &rust,
        other_than: Some(&known),
        ..query
    };
    assert_eq!(
        summary(db.compute_daily_stats(rust_and_other).await.unwrap()),
        [
            row("01", "rust", 2, 1),
            row("02", "haskell", 1, 0),
            row("02", "rust", 1, 0),
        ]
    );

    let empty = DailyStatsQuery {
        start: at(20, 0),
        end: at(21, 0),
        ..query
    };
    assert!(db.compute_daily_stats(empty).await.unwrap().is_empty());
}

#[tokio::test]
async fn deleting_a_user_removes_their_usage() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    let b = user(&db, "b@example.com").await;
    db.create_user_event(a, "view", at(1, 0), "{}")
        .await
        .unwrap();
    db.create_user_event(b, "view", at(1, 0), "{}")
        .await
        .unwrap();
    db.create_user_completion(a, "c1", "rust", at(1, 0))
        .await
        .unwrap();
    db.delete_user(a).await.unwrap();
    let events = db
        .list_user_events(&[], at(1, 0), at(2, 0), Pagination::all())
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].user_id, b);
    assert!(
        !db.increment_user_completion("c1", CompletionCounter::View)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn completions_of_unknown_users_are_rejected() {
    let db = db().await;
    assert!(matches!(
        db.create_user_completion(7, "c", "rust", at(1, 0)).await,
        Err(DbError::NotFound { what: "user" })
    ));
}
