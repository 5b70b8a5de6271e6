#!/bin/bash
cd /app/project && printf 'all: build/app.txt\n\nbuild/app.txt: src/header.txt src/body.txt\n\tmkdir -p build\n\tcat src/header.txt src/body.txt > build/app.txt\n' > Makefile && make
