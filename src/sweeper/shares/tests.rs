//! The shares' checks: per target (`targets`) and per account (`accounts`).

mod targets {
    use super::super::*;

    fn acct() -> AccountId {
        AccountId::from_trusted("acme")
    }

    #[test]
    fn a_full_target_has_room_again_once_half_its_share_is_free() {
        let f = InFlight::new(4, 256);
        let a = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        let b = TargetId::from_trusted("DI-T-bbbbbbbbbb".into());
        assert!(f.shares().room.is_empty());
        f.started(&acct(), &a, 4);
        f.started(&acct(), &b, 1);
        assert_eq!(f.full().targets, vec![a.clone()]);
        let mut room = f.shares().room;
        room.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
        assert_eq!(room, vec![(a.clone(), 0), (b.clone(), 3)]);
        // One ended: a quarter free is not enough to claim again.
        f.ended(&a, &acct(), 1);
        assert_eq!(f.full().targets, vec![a.clone()]);
        // Two ended: half is free; the sweeper is told once.
        f.ended(&a, &acct(), 1);
        assert!(f.full().targets.is_empty());
        f.ended(&a, &acct(), 2);
        f.ended(&b, &acct(), 1);
        assert!(f.shares().room.is_empty(), "ended targets are forgotten");
    }

    #[test]
    fn a_target_that_got_less_than_its_share_tops_up_at_once() {
        let f = InFlight::new(4, 256);
        let a = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        // Asked for 4; another instance held one of the rows.
        f.started(&acct(), &a, 3);
        assert!(f.full().targets.is_empty());
        assert_eq!(f.shares().room, vec![(a.clone(), 1)]);
        assert_eq!(f.gated_shares().room, vec![(a.clone(), 1)]);
        f.started(&acct(), &a, 1);
        assert_eq!(f.full().targets, vec![a.clone()]);
        // Full once, it waits for half of its share again.
        f.ended(&a, &acct(), 1);
        assert_eq!(f.full().targets, vec![a.clone()]);
    }

    #[test]
    fn a_pace_that_gives_a_full_target_room_wakes_the_sweeper() {
        use futures::FutureExt;
        let f = InFlight::new(4, 256);
        let a = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        f.started(&acct(), &a, 4);
        assert!(f.freed.notified().now_or_never().is_none());
        // Its first delivery ended quickly: the target may take more now,
        // with all four of its slots still taken.
        f.paced(&a, Duration::from_millis(1));
        assert!(f.full().targets.is_empty());
        assert!(
            f.freed.notified().now_or_never().is_some(),
            "the sweeper that waits for a full target is told"
        );
    }

    #[test]
    fn a_quick_target_may_claim_ahead_of_its_slots_and_a_slow_one_may_not() {
        let f = InFlight::new(4, 256);
        let quick = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        let slow = TargetId::from_trusted("DI-T-bbbbbbbbbb".into());
        f.started(&acct(), &quick, 4);
        f.started(&acct(), &slow, 4);
        // Unknown pace: no more than the slots.
        assert_eq!(f.full().targets.len(), 2);
        f.paced(&quick, Duration::from_millis(1));
        f.paced(&slow, Duration::from_secs(5));
        let room: HashMap<_, _> = f.shares().room.into_iter().collect();
        // 4 per 1 ms clears far more than 8 shares in 100 ms: capped at 8 shares.
        assert_eq!(room[&quick], 4 * PREFETCH_FACTOR);
        assert_eq!(room[&slow], 0);
        // A gated claim takes only what starts at once.
        assert!(f.gated_shares().room.iter().all(|(_, n)| *n == 0));
    }
}

mod accounts {
    use futures::FutureExt;

    use super::super::*;

    fn target(c: char) -> TargetId {
        TargetId::from_trusted(format!("DI-T-{}", c.to_string().repeat(10)))
    }

    fn may_start(f: &InFlight, account: &AccountId, n: u32) -> bool {
        let counts = f.counts.lock().unwrap();
        f.account_may_start(&counts, Some(account), n)
    }

    #[test]
    fn an_account_holds_at_most_its_part_and_a_newcomer_starts_beside_it() {
        // 16 slots: 4 kept for newcomers, 12 shared by the busy accounts;
        // no target is ever full here.
        let f = InFlight::new(16, 16);
        let hog = AccountId::from_trusted("hog");
        let other = AccountId::from_trusted("other");
        f.started(&hog, &target('a'), 8);
        assert!(may_start(&f, &hog, 4));
        f.started(&hog, &target('b'), 4);
        // Its part is full, though its targets have slots free.
        assert!(!may_start(&f, &hog, 1));
        let full = f.full();
        assert_eq!(full.accounts, vec![hog.clone()]);
        assert!(full.targets.is_empty());
        let shares = f.shares();
        assert_eq!(shares.accounts, vec![(hog.clone(), 0)]);
        // A newcomer may claim half of what the busy accounts share.
        assert_eq!(shares.per_account, 6);
        assert!(may_start(&f, &other, 1));
        f.started(&other, &target('c'), 6);
        assert!(!may_start(&f, &other, 1), "the newcomer holds its part");
        // The hog is over its part now (6 of 12): what ends does not let it
        // start more until it is under it.
        assert!(f.freed.notified().now_or_never().is_none());
        f.ended(&target('a'), &hog, 6);
        assert!(!may_start(&f, &hog, 1));
        assert!(f.freed.notified().now_or_never().is_none());
        f.ended(&target('a'), &hog, 2);
        assert!(may_start(&f, &hog, 2));
        assert!(!may_start(&f, &hog, 3));
        assert!(
            f.freed.notified().now_or_never().is_some(),
            "the sweeper that left the hog out is told it has room"
        );
        assert!(f.full().accounts.contains(&other));
        assert!(!f.full().accounts.contains(&hog));
    }

    #[test]
    fn an_account_that_leaves_gives_the_others_their_parts_back() {
        let f = InFlight::new(8, 16);
        let hog = AccountId::from_trusted("hog");
        let other = AccountId::from_trusted("other");
        f.started(&hog, &target('a'), 6);
        f.started(&other, &target('b'), 6);
        assert!(!may_start(&f, &hog, 1));
        assert_eq!(f.full().accounts.len(), 2);
        f.ended(&target('b'), &other, 6);
        assert!(
            f.freed.notified().now_or_never().is_some(),
            "a part grew: the sweeper is told"
        );
        assert!(may_start(&f, &hog, 6), "alone, the hog has 12");
        assert!(!may_start(&f, &hog, 7));
    }

    #[test]
    fn an_instance_of_one_slot_still_delivers() {
        let f = InFlight::new(8, 1);
        let a = AccountId::from_trusted("a");
        assert!(may_start(&f, &a, 1));
        f.started(&a, &target('a'), 1);
        assert!(!may_start(&f, &a, 1));
    }
}
