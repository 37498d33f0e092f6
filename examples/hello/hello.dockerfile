# Built FROM a base image made locally from Debian packages (scripts/build-images.sh); sbx never
# pulls a base image implicitly.
FROM sbx-base/bookworm:1
COPY hello.sh /usr/local/bin/hello
RUN chmod 0755 /usr/local/bin/hello
USER agent
WORKDIR /home/agent/workspace
CMD ["/usr/local/bin/hello"]
