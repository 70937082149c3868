use tabby_db::{Attachment, AttachmentCode, AttachmentCodeFileList, DbError, Pagination};

use crate::{db, user};

#[tokio::test]
async fn threads_messages_and_streamed_content() {
    let db = db().await;
    let owner = user(&db, "owner@example.com").await;
    let other = user(&db, "other@example.com").await;
    let thread = db.create_thread(owner, true).await.unwrap();
    let question = db
        .create_thread_message(thread, "user", "Where is X?", &Attachment::default(), None)
        .await
        .unwrap();
    let answer = db
        .create_thread_message(thread, "assistant", "", &Attachment::default(), None)
        .await
        .unwrap();
    for delta in ["X is ", "in ", "x.rs"] {
        db.append_thread_message_content(answer, delta)
            .await
            .unwrap();
    }
    db.update_thread_message_attachment(answer, |a| {
        a.code = Some(vec![AttachmentCode {
            git_url: "https://example.com/r".into(),
            commit: None,
            language: "rust".into(),
            filepath: "x.rs".into(),
            content: "fn x() {}".into(),
            start_line: Some(3),
            reason: None,
        }])
    })
    .await
    .unwrap();
    db.update_thread_message_attachment(answer, |a| {
        a.code_file_list = Some(AttachmentCodeFileList {
            file_list: vec!["x.rs".into()],
            truncated: false,
        })
    })
    .await
    .unwrap();
    db.update_thread_message_code_source_id(answer, "git:1")
        .await
        .unwrap();

    let messages = db
        .list_thread_messages(thread, Pagination::all())
        .await
        .unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].content, "X is in x.rs");
    let attachment = messages[1].attachment();
    assert_eq!(
        attachment.code.unwrap()[0].start_line,
        Some(3),
        "both updates kept"
    );
    assert_eq!(attachment.code_file_list.unwrap().file_list, ["x.rs"]);
    assert_eq!(messages[1].code_source_id.as_deref(), Some("git:1"));
    assert_eq!(messages[0].id, question);

    db.update_thread_relevant_questions(thread, &["Why?".into()])
        .await
        .unwrap();
    assert_eq!(
        db.get_thread(thread)
            .await
            .unwrap()
            .unwrap()
            .relevant_questions(),
        ["Why?"]
    );

    // Visibility: the other user sees nothing ephemeral of the owner, then the shared thread.
    let visible = |viewer| {
        let db = db.clone();
        async move {
            db.list_threads(&[], None, Some(viewer), None, Pagination::all())
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(visible(other).await, 0);
    assert_eq!(visible(owner).await, 1);
    db.set_thread_persisted(thread).await.unwrap();
    assert_eq!(visible(other).await, 1);

    // Pairs: only a user message followed by its answer.
    assert!(matches!(
        db.delete_thread_message_pair(thread, answer, question)
            .await,
        Err(DbError::NotFound { .. })
    ));
    db.delete_thread_message_pair(thread, question, answer)
        .await
        .unwrap();
    assert!(
        db.list_thread_messages(thread, Pagination::all())
            .await
            .unwrap()
            .is_empty()
    );

    db.delete_thread(thread).await.unwrap();
    assert!(db.get_thread(thread).await.unwrap().is_none());
    assert!(matches!(
        db.delete_thread(thread).await,
        Err(DbError::NotFound { .. })
    ));
}

#[tokio::test]
async fn only_idle_ephemeral_threads_are_removed() {
    let db = db().await;
    let owner = user(&db, "owner@example.com").await;
    let fresh = db.create_thread(owner, true).await.unwrap();
    let kept = db.create_thread(owner, false).await.unwrap();
    let idle = db.create_thread(owner, true).await.unwrap();
    db.backdate_thread_for_tests(idle, 8).await.unwrap();
    db.backdate_thread_for_tests(kept, 30).await.unwrap();
    assert_eq!(db.delete_idle_ephemeral_threads(7).await.unwrap(), 1);
    assert!(db.get_thread(idle).await.unwrap().is_none());
    assert!(db.get_thread(fresh).await.unwrap().is_some());
    assert!(db.get_thread(kept).await.unwrap().is_some());
}
