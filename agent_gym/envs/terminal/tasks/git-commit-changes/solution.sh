#!/bin/bash
cd /app/repo && git add -A && git -c user.name=agent -c user.email=agent@example.com commit -q -m 'Add feature'
