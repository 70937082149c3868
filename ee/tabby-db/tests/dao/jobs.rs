//! The background-jobs tables: job runs (de-duplicated enqueueing, claiming in order and
//! atomically, finishing, stale runs, stats, retention), notifications and their per-user read
//! flags, web documents, and ingested documents (upsert, guarded status, deletion, expiry,
//! stats).

use std::collections::HashSet;

use tabby_db::{DbConn, DbError, IngestedDocumentDAO, IngestionStatsDAO, JobStatsDAO, Pagination};

use crate::{SharedDb, db, shared_db, user};

async fn age_run(shared: &SharedDb, id: i64, days: u32) {
    let changed = shared
        .exec(&format!(
            "UPDATE job_runs SET created_at = DATETIME('now', '-{days} days') WHERE id = {id}"
        ))
        .await;
    assert_eq!(changed, 1);
}

const HOURLY: &str = "\"Hourly\"";
const DAILY: &str = "\"Daily\"";

// ---- job runs ----

#[tokio::test]
async fn an_identical_pending_command_is_enqueued_once() {
    let db = db().await;
    let (first, created) = db.create_job_run("hourly", HOURLY).await.unwrap();
    assert!(created);
    assert_eq!(
        db.create_job_run("hourly", HOURLY).await.unwrap(),
        (first, false),
        "pending duplicate reuses the row"
    );
    // Another command is another row.
    let (daily, created) = db.create_job_run("daily", DAILY).await.unwrap();
    assert!(created && daily != first);

    let run = db.get_job_run(first).await.unwrap().unwrap();
    assert!(run.is_pending() && !run.is_running());
    assert_eq!((run.job.as_str(), run.command.as_str()), ("hourly", HOURLY));

    // Once claimed (running), the same command makes a new pending row...
    let claimed = db.claim_next_job_run().await.unwrap().unwrap();
    assert_eq!(claimed.id, first);
    assert!(claimed.is_running() && claimed.started_at.is_some());
    let (second, created) = db.create_job_run("hourly", HOURLY).await.unwrap();
    assert!(created && second > daily, "{second}");
    // ...which is itself de-duplicated.
    assert_eq!(
        db.create_job_run("hourly", HOURLY).await.unwrap(),
        (second, false)
    );
    // And after the first finished, still the one pending row.
    db.finish_job_run(first, 0).await.unwrap();
    assert_eq!(
        db.create_job_run("hourly", HOURLY).await.unwrap(),
        (second, false)
    );
    assert_eq!(
        db.latest_job_run(HOURLY).await.unwrap().map(|r| r.id),
        Some(second)
    );
    assert_eq!(db.latest_job_run("\"Nope\"").await.unwrap(), None);
}

#[tokio::test]
async fn concurrent_identical_triggers_make_one_row() {
    let shared = shared_db().await;
    let db = shared.db.clone();
    let attempts: Vec<_> = (0..12)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.create_job_run("daily", DAILY).await.unwrap() })
        })
        .collect();
    let mut results = Vec::new();
    for a in attempts {
        results.push(a.await.unwrap());
    }
    let ids: HashSet<i64> = results.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 1, "{results:?}");
    assert_eq!(results.iter().filter(|(_, new)| *new).count(), 1);
    assert_eq!(
        db.list_job_runs(&[], &[], Pagination::all())
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn runs_are_claimed_oldest_first_and_finished() {
    let db = db().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let command = format!("{{\"WebCrawler\":{{\"source_id\":\"s{i}\",\"url\":\"http://x\"}}}}");
        ids.push(db.create_job_run("web_crawler", &command).await.unwrap().0);
    }
    let mut claimed = Vec::new();
    while let Some(run) = db.claim_next_job_run().await.unwrap() {
        assert!(run.is_running(), "{run:?}");
        claimed.push(run.id);
    }
    assert_eq!(claimed, ids);
    // A claimed run is not claimed again, even while it is still running.
    assert_eq!(db.claim_next_job_run().await.unwrap(), None);

    db.finish_job_run(ids[0], 0).await.unwrap();
    db.finish_job_run(ids[1], 1).await.unwrap();
    let runs = db
        .list_job_runs(&ids, &[], Pagination::all())
        .await
        .unwrap();
    assert_eq!(runs[0].exit_code, Some(0));
    assert!(runs[0].end_ts.is_some() && !runs[0].is_running() && !runs[0].is_pending());
    assert_eq!(runs[1].exit_code, Some(1));
    assert_eq!(runs[2].exit_code, None);
    assert!(runs[2].is_running());
    assert!(matches!(
        db.finish_job_run(9999, 0).await,
        Err(DbError::NotFound { .. })
    ));

    // Filters: by id and by job name.
    let only = db
        .list_job_runs(&[ids[1]], &[], Pagination::all())
        .await
        .unwrap();
    assert_eq!(only.iter().map(|r| r.id).collect::<Vec<_>>(), [ids[1]]);
    db.create_job_run("hourly", HOURLY).await.unwrap();
    let crawls = db
        .list_job_runs(&[], &["web_crawler".into()], Pagination::all())
        .await
        .unwrap();
    assert_eq!(crawls.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
}

#[tokio::test]
async fn concurrent_claims_never_return_the_same_run() {
    let shared = shared_db().await;
    let db = shared.db.clone();
    let total = 40;
    let mut created = Vec::new();
    for i in 0..total {
        created.push(
            db.create_job_run("daily", &format!("\"Daily{i}\""))
                .await
                .unwrap()
                .0,
        );
    }
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                while let Some(run) = db.claim_next_job_run().await.unwrap() {
                    mine.push(run.id);
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        let mine = w.await.unwrap();
        // Each worker sees its claims in increasing id order.
        assert!(mine.windows(2).all(|p| p[0] < p[1]), "{mine:?}");
        all.extend(mine);
    }
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), total, "every run claimed exactly once: {all:?}");
    assert_eq!(unique, created.into_iter().collect());
    db.close().await;
}

#[tokio::test]
async fn stale_runs_are_failed_and_returned_once() {
    let db = db().await;
    let (running, _) = db.create_job_run("hourly", HOURLY).await.unwrap();
    let (done, _) = db.create_job_run("daily", DAILY).await.unwrap();
    assert_eq!(db.claim_next_job_run().await.unwrap().unwrap().id, running);
    assert_eq!(db.claim_next_job_run().await.unwrap().unwrap().id, done);
    db.finish_job_run(done, 0).await.unwrap();
    let (pending, _) = db
        .create_job_run("index_garbage_collection", "\"IndexGarbageCollection\"")
        .await
        .unwrap();

    let stale = db.finalize_stale_job_runs().await.unwrap();
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(stale[0].id, running);
    assert_eq!(stale[0].exit_code, Some(-1));
    assert_eq!(stale[0].command, HOURLY);
    assert!(stale[0].end_ts.is_some());

    let get = |id| {
        let db = db.clone();
        async move { db.get_job_run(id).await.unwrap().unwrap() }
    };
    assert_eq!(get(running).await.exit_code, Some(-1));
    assert_eq!(
        get(done).await.exit_code,
        Some(0),
        "finished runs keep their code"
    );
    assert!(get(pending).await.is_pending(), "pending runs stay pending");
    assert!(db.finalize_stale_job_runs().await.unwrap().is_empty());
    // The pending run is still the next one claimed.
    assert_eq!(db.claim_next_job_run().await.unwrap().unwrap().id, pending);
}

#[tokio::test]
async fn stats_count_the_last_days_by_outcome_and_job() {
    let shared = shared_db().await;
    let db = shared.db.clone();
    let stats = |jobs: Vec<String>, days| {
        let db = db.clone();
        async move { db.job_run_stats(&jobs, days).await.unwrap() }
    };
    assert_eq!(stats(vec![], 7).await, JobStatsDAO::default());

    let mk = |job: &'static str, command: String| {
        let db = db.clone();
        async move { db.create_job_run(job, &command).await.unwrap().0 }
    };
    let ok = mk("hourly", "\"H1\"".into()).await;
    let failed = mk("hourly", "\"H2\"".into()).await;
    let interrupted = mk("daily", "\"D1\"".into()).await;
    let running = mk("daily", "\"D2\"".into()).await;
    let _pending = mk("daily", "\"D3\"".into()).await;
    let old = mk("hourly", "\"H3\"".into()).await;
    for _ in 0..5 {
        db.claim_next_job_run().await.unwrap().unwrap();
    }
    db.finish_job_run(ok, 0).await.unwrap();
    db.finish_job_run(failed, 1).await.unwrap();
    db.finish_job_run(interrupted, -1).await.unwrap();
    db.finish_job_run(old, 0).await.unwrap();
    age_run(&shared, old, 10).await;
    let _ = running;

    assert_eq!(
        stats(vec![], 7).await,
        JobStatsDAO {
            success: 1,
            failed: 2,
            pending: 2
        },
        "running and pending both count as pending; the 10-day-old run is out"
    );
    assert_eq!(
        stats(vec![], 30).await,
        JobStatsDAO {
            success: 2,
            failed: 2,
            pending: 2
        }
    );
    assert_eq!(
        stats(vec!["hourly".into()], 7).await,
        JobStatsDAO {
            success: 1,
            failed: 1,
            pending: 0
        }
    );
    assert_eq!(
        stats(vec!["daily".into(), "web_crawler".into()], 7).await,
        JobStatsDAO {
            success: 0,
            failed: 1,
            pending: 2
        }
    );
    db.close().await;
}

#[tokio::test]
async fn only_old_finished_runs_are_deleted() {
    let shared = shared_db().await;
    let db = shared.db.clone();
    let (old_done, _) = db.create_job_run("hourly", "\"A\"").await.unwrap();
    let (old_running, _) = db.create_job_run("hourly", "\"B\"").await.unwrap();
    let (recent_done, _) = db.create_job_run("hourly", "\"C\"").await.unwrap();
    assert_eq!(db.claim_next_job_run().await.unwrap().unwrap().id, old_done);
    db.finish_job_run(old_done, 0).await.unwrap();
    // "B" is claimed and never finished (a run still going); "C" finishes.
    assert_eq!(
        db.claim_next_job_run().await.unwrap().unwrap().id,
        old_running
    );
    assert_eq!(
        db.claim_next_job_run().await.unwrap().unwrap().id,
        recent_done
    );
    db.finish_job_run(recent_done, 1).await.unwrap();
    age_run(&shared, old_done, 91).await;
    age_run(&shared, old_running, 91).await;

    assert_eq!(db.delete_old_job_runs(90).await.unwrap(), 1);
    assert!(db.get_job_run(old_done).await.unwrap().is_none());
    assert!(
        db.get_job_run(old_running).await.unwrap().is_some(),
        "an unfinished run is never deleted"
    );
    assert!(db.get_job_run(recent_done).await.unwrap().is_some());
    assert_eq!(db.delete_old_job_runs(90).await.unwrap(), 0);
    db.close().await;
}

// ---- notifications ----

#[tokio::test]
async fn notifications_by_recipient_with_per_user_read_flags() {
    let db = db().await;
    let admin = db
        .create_user("admin@example.com", Some("h"), true, None)
        .await
        .unwrap();
    let other_admin = db
        .create_user("admin2@example.com", Some("h"), true, None)
        .await
        .unwrap();
    let member = user(&db, "member@example.com").await;

    let for_admins = db.create_notification("admin", "job failed").await.unwrap();
    let for_all = db
        .create_notification("all_user", "maintenance tonight")
        .await
        .unwrap();

    let list = |user_id, is_admin| {
        let db = db.clone();
        async move {
            db.list_notifications_for(user_id, is_admin)
                .await
                .unwrap()
                .into_iter()
                .map(|n| (n.id, n.read))
                .collect::<Vec<_>>()
        }
    };
    // Newest first; members do not see admin notifications.
    assert_eq!(
        list(admin, true).await,
        [(for_all, false), (for_admins, false)]
    );
    assert_eq!(list(member, false).await, [(for_all, false)]);
    let n = &db.list_notifications_for(member, false).await.unwrap()[0];
    assert_eq!(
        (n.recipient.as_str(), n.content.as_str()),
        ("all_user", "maintenance tonight")
    );

    // Read flags are per user.
    db.mark_notifications_read(admin, true, Some(for_admins))
        .await
        .unwrap();
    assert_eq!(
        list(admin, true).await,
        [(for_all, false), (for_admins, true)]
    );
    assert_eq!(
        list(other_admin, true).await,
        [(for_all, false), (for_admins, false)]
    );
    // Marking twice is fine.
    db.mark_notifications_read(admin, true, Some(for_admins))
        .await
        .unwrap();

    // A member cannot mark (or learn about) an admin notification; unknown ids are not found.
    assert!(matches!(
        db.mark_notifications_read(member, false, Some(for_admins))
            .await,
        Err(DbError::NotFound { .. })
    ));
    assert!(matches!(
        db.mark_notifications_read(admin, true, Some(9999)).await,
        Err(DbError::NotFound { .. })
    ));

    // "All" marks exactly what the user receives.
    db.mark_notifications_read(member, false, None)
        .await
        .unwrap();
    assert_eq!(list(member, false).await, [(for_all, true)]);
    assert_eq!(
        list(other_admin, true).await,
        [(for_all, false), (for_admins, false)]
    );
    // Had the member's "all" marked the admin one, promoting them would show it read.
    assert_eq!(
        list(member, true).await,
        [(for_all, true), (for_admins, false)]
    );
    db.mark_notifications_read(other_admin, true, None)
        .await
        .unwrap();
    assert_eq!(
        list(other_admin, true).await,
        [(for_all, true), (for_admins, true)]
    );

    // New notifications arrive unread; deleting one removes it for everyone.
    let later = db.create_notification("admin", "again").await.unwrap();
    assert_eq!(list(other_admin, true).await[0], (later, false));
    db.delete_notification(for_admins).await.unwrap();
    assert_eq!(list(admin, true).await, [(later, false), (for_all, false)]);
    assert!(matches!(
        db.delete_notification(for_admins).await,
        Err(DbError::NotFound { .. })
    ));
    // Deleting a user with read flags is fine (the flags go with them).
    db.delete_user(other_admin).await.unwrap();
    assert_eq!(list(admin, true).await.len(), 2);
}

// ---- web documents ----

#[tokio::test]
async fn web_documents_crud_with_unique_names_and_urls() {
    let db = db().await;
    let docs = db
        .create_web_document("Docs", "https://example.com/docs/", false)
        .await
        .unwrap();
    let preset = db
        .create_web_document("Preset", "https://example.com/preset/", true)
        .await
        .unwrap();
    let got = db.get_web_document(docs).await.unwrap().unwrap();
    assert_eq!(
        (got.name.as_str(), got.url.as_str(), got.is_preset),
        ("Docs", "https://example.com/docs/", false)
    );
    assert!(db.get_web_document(9999).await.unwrap().is_none());

    for (name, url) in [
        ("Docs", "https://example.com/other/"),
        ("Other", "https://example.com/docs/"),
    ] {
        assert!(
            matches!(
                db.create_web_document(name, url, false).await,
                Err(DbError::AlreadyExists { .. })
            ),
            "{name} {url}"
        );
    }

    let ids = |list: Vec<tabby_db::WebDocumentDAO>| list.iter().map(|d| d.id).collect::<Vec<_>>();
    assert_eq!(
        ids(db
            .list_web_documents(&[], None, Pagination::all())
            .await
            .unwrap()),
        [docs, preset]
    );
    assert_eq!(
        ids(db
            .list_web_documents(&[], Some(false), Pagination::all())
            .await
            .unwrap()),
        [docs]
    );
    assert_eq!(
        ids(db
            .list_web_documents(&[], Some(true), Pagination::all())
            .await
            .unwrap()),
        [preset]
    );
    assert_eq!(
        ids(db
            .list_web_documents(&[preset], None, Pagination::all())
            .await
            .unwrap()),
        [preset]
    );

    db.delete_web_document(docs).await.unwrap();
    assert!(matches!(
        db.delete_web_document(docs).await,
        Err(DbError::NotFound { .. })
    ));
    // The name and URL are free again.
    db.create_web_document("Docs", "https://example.com/docs/", false)
        .await
        .unwrap();
}

// ---- ingested documents ----

async fn doc(db: &DbConn, source: &str, id: &str) -> IngestedDocumentDAO {
    db.list_pending_ingested_documents(1000)
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.source == source && d.doc_id == id)
        .unwrap_or_else(|| panic!("{source}/{id} is not pending"))
}

fn stats(source: &str, pending: i64, indexed: i64, failed: i64) -> IngestionStatsDAO {
    IngestionStatsDAO {
        source: source.into(),
        pending,
        indexed,
        failed,
        total: pending + indexed + failed,
    }
}

#[tokio::test]
async fn ingested_documents_upsert_and_guarded_status() {
    let db = db().await;
    let far = 4_000_000_000;
    let id = db
        .upsert_ingested_document("wiki", "page-1", None, "Title", "Body v1", far)
        .await
        .unwrap();
    let v1 = doc(&db, "wiki", "page-1").await;
    assert_eq!(
        (v1.id, v1.status.as_str(), v1.link.as_deref()),
        (id, "pending", None)
    );
    assert!(
        db.set_ingested_document_status(&v1, "indexed")
            .await
            .unwrap()
    );
    assert!(
        db.list_pending_ingested_documents(10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        db.ingestion_stats(&[]).await.unwrap(),
        [stats("wiki", 0, 1, 0)]
    );

    // Replacing the document makes it pending again, under the same row.
    let again = db
        .upsert_ingested_document(
            "wiki",
            "page-1",
            Some("https://wiki/p1"),
            "Title 2",
            "Body v2",
            far + 1,
        )
        .await
        .unwrap();
    assert_eq!(again, id);
    let v2 = doc(&db, "wiki", "page-1").await;
    assert_eq!(
        (
            v2.title.as_str(),
            v2.body.as_str(),
            v2.link.as_deref(),
            v2.expired_at
        ),
        ("Title 2", "Body v2", Some("https://wiki/p1"), far + 1)
    );
    assert_eq!(v2.status, "pending");

    // The indexer's stale copy (v1) cannot mark the new version.
    assert!(
        !db.set_ingested_document_status(&v1, "indexed")
            .await
            .unwrap()
    );
    assert_eq!(doc(&db, "wiki", "page-1").await.status, "pending");
    // A version replaced while being indexed, with only the link changed, is also kept.
    let v2_read = doc(&db, "wiki", "page-1").await;
    db.upsert_ingested_document("wiki", "page-1", None, "Title 2", "Body v2", far + 1)
        .await
        .unwrap();
    assert!(
        !db.set_ingested_document_status(&v2_read, "indexed")
            .await
            .unwrap()
    );
    let v3 = doc(&db, "wiki", "page-1").await;
    assert!(
        db.set_ingested_document_status(&v3, "failed")
            .await
            .unwrap()
    );
    assert_eq!(
        db.ingestion_stats(&[]).await.unwrap(),
        [stats("wiki", 0, 0, 1)]
    );

    // Statuses are constrained.
    let other = db
        .upsert_ingested_document("wiki", "page-2", None, "T", "B", far)
        .await
        .unwrap();
    let p2 = doc(&db, "wiki", "page-2").await;
    assert_eq!(p2.id, other);
    assert!(db.set_ingested_document_status(&p2, "bogus").await.is_err());
    assert_eq!(doc(&db, "wiki", "page-2").await.status, "pending");

    // Pending documents oldest first, limited.
    db.upsert_ingested_document("notes", "n1", None, "T", "B", far)
        .await
        .unwrap();
    let pending = db.list_pending_ingested_documents(1).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].doc_id, "page-2");
    assert_eq!(
        db.list_pending_ingested_documents(10).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn ingested_documents_deletion_expiry_stats_and_work() {
    let db = db().await;
    let now = 1_700_000_000;
    assert!(!db.ingestion_has_work(now).await.unwrap());
    for (source, id, expires) in [
        ("wiki", "a", now + 100),
        ("wiki", "b", now + 100),
        ("wiki", "c", now - 1),
        ("notes", "x", now + 100),
        ("notes", "y", now),
    ] {
        db.upsert_ingested_document(source, id, None, "T", "B", expires)
            .await
            .unwrap();
    }
    assert!(db.ingestion_has_work(now - 1000).await.unwrap(), "pending");
    // Index everything: no more work until something expires.
    for d in db.list_pending_ingested_documents(100).await.unwrap() {
        assert!(
            db.set_ingested_document_status(&d, "indexed")
                .await
                .unwrap()
        );
    }
    assert!(!db.ingestion_has_work(now - 1000).await.unwrap());
    assert!(db.ingestion_has_work(now - 1).await.unwrap(), "c expires");

    assert_eq!(
        db.ingestion_stats(&[]).await.unwrap(),
        [stats("notes", 0, 2, 0), stats("wiki", 0, 3, 0)]
    );
    assert_eq!(
        db.ingestion_stats(&["wiki".into(), "absent".into()])
            .await
            .unwrap(),
        [stats("wiki", 0, 3, 0)]
    );

    // Expiry: at `now`, what expired at or before it goes (and is reported).
    let mut expired = db.delete_expired_ingested_documents(now).await.unwrap();
    expired.sort();
    assert_eq!(
        expired,
        [("notes".into(), "y".into()), ("wiki".into(), "c".into())]
    );
    assert!(
        db.delete_expired_ingested_documents(now)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!db.ingestion_has_work(now).await.unwrap());

    // One document of a source, then the whole source.
    assert_eq!(
        db.delete_ingested_documents("wiki", Some("a"))
            .await
            .unwrap(),
        [("wiki".to_string(), "a".to_string())]
    );
    assert!(
        db.delete_ingested_documents("wiki", Some("a"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        db.delete_ingested_documents("notes", Some("b"))
            .await
            .unwrap()
            .is_empty(),
        "ids are per source"
    );
    let mut ids = db.list_ingested_doc_ids("wiki").await.unwrap();
    ids.sort();
    assert_eq!(ids, ["b"]);
    assert_eq!(
        db.delete_ingested_documents("notes", None).await.unwrap(),
        [("notes".to_string(), "x".to_string())]
    );
    assert!(db.list_ingested_doc_ids("notes").await.unwrap().is_empty());
    assert_eq!(db.list_ingested_doc_ids("wiki").await.unwrap(), ["b"]);
    assert_eq!(
        db.ingestion_stats(&[]).await.unwrap(),
        [stats("wiki", 0, 1, 0)]
    );
    assert!(
        db.delete_ingested_documents("absent", None)
            .await
            .unwrap()
            .is_empty()
    );
}

// ---- leases ----

#[tokio::test]
async fn a_lease_has_one_holder_until_it_runs_out() {
    let shared = shared_db().await;
    let db = shared.db.clone();
    assert!(
        db.take_lease("worker", "a", 15).await.unwrap(),
        "free: a takes it"
    );
    assert!(
        !db.take_lease("worker", "b", 15).await.unwrap(),
        "b waits while a's runs"
    );
    assert!(db.take_lease("worker", "a", 15).await.unwrap(), "a renews");
    assert!(
        db.take_lease("schedules", "b", 15).await.unwrap(),
        "another name, another lease"
    );
    // a stops renewing: once its lease has run out, b takes it, and a is refused.
    let expired = shared
        .exec("UPDATE leases SET expires_at = DATETIME('now', '-1 seconds') WHERE name = 'worker'")
        .await;
    assert_eq!(expired, 1);
    assert!(db.take_lease("worker", "b", 15).await.unwrap());
    assert!(!db.take_lease("worker", "a", 15).await.unwrap());
    // Holders racing for a free lease: exactly one gets it.
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move { db.take_lease("race", &format!("h{i}"), 15).await.unwrap() })
        })
        .collect();
    let mut takes = Vec::new();
    for racer in racers {
        takes.push(racer.await.unwrap());
    }
    assert_eq!(takes.iter().filter(|t| **t).count(), 1, "{takes:?}");
}

// ---- change counters ----

#[tokio::test]
async fn change_counters_count_bumps_per_name_across_connections() {
    let shared = shared_db().await;
    let db = shared.db.clone();
    let other = shared.open_again().await;
    assert_eq!(db.change_counter("directory").await.unwrap(), 0);
    assert_eq!(db.bump_change_counter("directory").await.unwrap(), 1);
    assert_eq!(db.bump_change_counter("directory").await.unwrap(), 2);
    assert_eq!(db.bump_change_counter("settings").await.unwrap(), 1);
    // Another process's connection sees them.
    assert_eq!(other.change_counter("directory").await.unwrap(), 2);
    assert_eq!(other.bump_change_counter("directory").await.unwrap(), 3);
    assert_eq!(db.change_counter("directory").await.unwrap(), 3);
    assert_eq!(db.change_counter("settings").await.unwrap(), 1);
}
