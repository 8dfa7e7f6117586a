"""Small shared helpers every stage uses: errors and exit codes, text, subprocesses,
redaction, bounded parsing, ids, untrusted files, signatures, the job folder's layout."""
