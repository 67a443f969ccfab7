-- The time zone a person chose for the portal's times; NULL is the browser's.
ALTER TABLE portal_users ADD COLUMN time_zone TEXT;
