-- Every insert into messages wrote an entry into messages_by_account
-- (account, id), whose only use was listing an account's messages newest
-- first without a state. Those lists now read each state's part of
-- messages_by_account_state (account, state, id) and merge them in id
-- order, so the index goes: one index fewer for every scheduled message.
DROP INDEX messages_by_account;
