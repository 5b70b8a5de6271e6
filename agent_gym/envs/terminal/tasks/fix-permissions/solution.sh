#!/bin/bash
chmod u+x /app/bin/run.sh && chmod 600 /app/secret.key && chmod 755 /app/public
