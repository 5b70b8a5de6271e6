test -f out/done && echo check ok
