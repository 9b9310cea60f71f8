#!/bin/sh
# A stand-in for a person's browser (issue 30, decisions): `$BROWSER URL` fetches the URL
# `login` opens (the start page on the supervisor's loopback listener, which redirects to the
# authorization URL; or that URL itself) and follows the redirects back to the listener.
# The authorization servers it is used with (the conformance suite's, tests/fixtures/
# oauth_server.mjs) approve by themselves. Errors go to stderr; the page is discarded.
exec curl -sS -o /dev/null -L --max-redirs 10 --max-time 30 "$1"
