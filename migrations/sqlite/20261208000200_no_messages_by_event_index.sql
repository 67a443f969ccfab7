-- GET /messages?eventId= reads the event's list of messages (event_messages,
-- whose primary key leads with the event) rather than an index of messages
-- by event: one index fewer to write for every message a publish makes.
DROP INDEX messages_by_event;
