from trtserve.cli import main

main()
