#!/bin/bash
cd /app/repo && git checkout -q -b hotfix && sed -i 's/version = 1/version = 2/' version.txt && git -c user.name=agent -c user.email=a@example.com commit -q -am 'Bump version'
